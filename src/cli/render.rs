//! The tables the commands print: a board page (`rankflow top`) and the
//! summary of an archive pass (`rankflow archive`).

use std::fmt::Write as _;

use crate::archive::runner::{Outcome, Report};
use crate::reader::List;

/// Renders a board page as a table.
pub(crate) fn render(list: &List) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}{}{}  ({} members, {})",
        list.board,
        list.view,
        list.period
            .as_deref()
            .map(|p| format!(" {p}"))
            .unwrap_or_default(),
        match (&list.scope, &list.scopes) {
            (Some(s), _) => format!(" scope={s}"),
            (None, Some(all)) => format!(" scopes={}", all.join(",")),
            (None, None) => String::new(),
        },
        list.total,
        list.source.name()
    );
    // A composite board prints its fields, a missing one as "-" (its
    // score would be an infinity that only encodes "ranks last").
    let names: Option<Vec<&str>> = list
        .entries
        .iter()
        .find_map(|e| e.fields.as_ref())
        .map(|f| f.0.iter().map(|(n, _)| n.as_str()).collect());
    let _ = write!(out, "{:>5}  {:<32}", "rank", "member");
    match &names {
        Some(names) => names.iter().for_each(|n| {
            let _ = write!(out, " {n:>20}");
        }),
        None => {
            let _ = write!(out, " {:>20}", "score");
        }
    }
    out.push('\n');
    for e in &list.entries {
        let _ = write!(out, "{:>5}  {:<32}", e.rank, e.member);
        match &e.fields {
            Some(fields) => fields.0.iter().for_each(|(_, v)| {
                let v = v.map(|v| v.to_string()).unwrap_or_else(|| "-".to_string());
                let _ = write!(out, " {v:>20}");
            }),
            None if e.score.fract() == 0.0 => {
                let _ = write!(out, " {:>20}", e.score as i64);
            }
            None => {
                let _ = write!(out, " {:>20}", e.score);
            }
        }
        out.push('\n');
    }
    out
}

/// The lines `rankflow archive` prints: one per period, then the total;
/// and whether every period went well.
pub(crate) fn render_archive(reports: &[Report]) -> (String, bool) {
    let mut out = String::new();
    let (mut archived, mut rows, mut other, mut failed) = (0u64, 0u64, 0u64, 0u64);
    for r in reports {
        let _ = match &r.outcome {
            Outcome::Archived { members, took } => {
                archived += 1;
                rows += members;
                writeln!(
                    out,
                    "archived {}: {members} members in {:.2} s",
                    r.period,
                    took.as_secs_f64()
                )
            }
            Outcome::AlreadyArchived => {
                other += 1;
                writeln!(out, "finished {}: already archived", r.period)
            }
            Outcome::Empty => {
                other += 1;
                writeln!(out, "closed {}: no events, nothing to archive", r.period)
            }
            Outcome::Busy => {
                other += 1;
                writeln!(out, "skipped {}: another archiver holds it", r.period)
            }
            Outcome::Failed(e) => {
                failed += 1;
                writeln!(out, "failed {}: {e}", r.period)
            }
        };
    }
    let _ = writeln!(
        out,
        "total: {} period(s): {archived} archived ({rows} members), {other} without a copy now, {failed} failed",
        reports.len()
    );
    (out, failed == 0)
}
