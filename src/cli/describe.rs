//! What `rankflow check` prints for a valid configuration: every board
//! with its views, key patterns and helper keys, the next resets, and what
//! can be read as a union.

use std::fmt::Write as _;

use crate::archive::connect::Target;
use crate::board::BoardSet;
use crate::board::duration::Span;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, period_of};
use crate::config::Config;

/// The text `rankflow check` prints for a valid config.
pub(crate) fn describe(config: &Config, boards: &BoardSet, now: i64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "config OK: {} board(s); topics {:?}; key prefix {:?}; batch {} events / {} ms",
        boards.boards.len(),
        config.kafka.topics,
        boards.key_prefix,
        config.batch.max_events,
        config.batch.max_delay_ms.get()
    );
    // Secrets are masked: this output ends up in tickets and CI logs.
    let _ = writeln!(out, "redis {}", config.redis.url.redacted());
    let _ = writeln!(out, "kafka {}", config.kafka.brokers);
    let _ = writeln!(
        out,
        "http {}; union views cached {}; at most {} open streams",
        config.http.listen,
        Span::Fixed {
            ms: config.http.union_cache.ms()
        },
        config.http.max_streams
    );
    for (k, v) in config.kafka.client_redacted() {
        let _ = writeln!(out, "  {k} = {v}");
    }
    if let Some(url) = config.archive.url_redacted() {
        let a = &config.archive;
        let _ = writeln!(
            out,
            "archive {url}; closes periods {} after their end; closed topic {}",
            Span::Fixed { ms: a.grace.ms() },
            a.closed_topic.as_deref().unwrap_or("(none)")
        );
        // Read already by the checks before this: an error cannot come.
        if let Ok(Some(target)) = Target::from_config(a) {
            let _ = writeln!(out, "  {}", target.tls_summary());
        }
    }
    let _ = writeln!(out, "{}", config.admin.summary());
    for note in config.notes() {
        let _ = writeln!(out, "note: {note}");
    }
    for b in &boards.boards {
        describe_board(&mut out, boards, b, now);
        describe_shadow(&mut out, config, b, now);
    }
    // Compiled already by the checks before this: an error cannot come.
    if let Ok(checks) = config.compile_checks()
        && !checks.is_empty()
    {
        let topic = config.kafka.quarantine_topic.as_deref().unwrap_or_default();
        let _ = writeln!(out, "checks (quarantine topic {topic}):");
        for line in checks.described() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// What a shadow board replaces and what its backfill will replay; or
/// whose keys a board took over.
fn describe_shadow(out: &mut String, config: &Config, b: &Board, now: i64) {
    if b.stored != b.name {
        let _ = writeln!(
            out,
            "  stored as  {} (its keys are that board's: where a backfill of `{}` recorded positions, the live consumers resume each partition no later than them and keep them up to date)",
            b.stored, b.stored
        );
    }
    let Some(shadow) = &b.shadow else {
        return;
    };
    let views: Vec<String> = b.views.iter().map(ViewSpec::name).collect();
    let _ = writeln!(
        out,
        "  shadow of  {} (a candidate replacement: promoting it serves its views {} as `{}`'s)",
        shadow.of,
        views.join(", "),
        shadow.of
    );
    let line = match shadow.backfill_from {
        None => "no `backfill_from`: it holds live events only".to_string(),
        Some(from) => {
            let since = chrono::DateTime::from_timestamp_millis(from)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default();
            let ago = Span::Fixed {
                ms: now.saturating_sub(from).max(0),
            };
            format!(
                "the retained messages of topics {:?} with event times from {since} ({ago} ago), up to where the live consumers are, into every view above",
                config.kafka.topics
            )
        }
    };
    let _ = writeln!(out, "  backfill   {line}");
}

/// What `check` says about reading a scoped board's scopes as one.
fn scope_unions_line(b: &Board) -> String {
    let Some(offer) = rankflow_offer(b) else {
        return "scopes cannot be read as one union (see `scope_slot` in docs/configuration.md)"
            .to_string();
    };
    let all = match offer.registry {
        0 => "scope=* off (scope_registry = 0)".to_string(),
        n => format!("scope=* lists up to {n} scopes per view"),
    };
    let slot = if b.board_slot {
        "every scope in the board's cluster slot: unions work on a Redis Cluster"
    } else {
        "each scope in its own cluster slot: unions on a single Redis only (scope_slot = \"board\" for a cluster)"
    };
    format!(
        "scope=a&scope=b (up to {}); {all}; {slot}",
        offer.max_listed
    )
}

fn rankflow_offer(b: &Board) -> Option<crate::reader::union::ScopeUnionOffer> {
    crate::reader::union::scope_offer(b)
}

fn describe_board(out: &mut String, boards: &BoardSet, b: &Board, now: i64) {
    let tag = b.tag(b.scope.is_some().then_some("<scope>"));
    let _ = writeln!(out, "\nboard {} (event {})", b.name, b.event.name());
    if let Some(f) = &b.filter {
        let _ = writeln!(out, "  filter     {}", f.source());
    }
    let _ = writeln!(out, "  member     {}", b.member.source());
    match &b.composite {
        None => {
            let _ = writeln!(out, "  score      {}", b.score.source());
        }
        Some(c) => {
            for (f, compiled) in c.layout.fields.iter().zip(&c.fields) {
                let filter = compiled
                    .filter
                    .as_ref()
                    .map(|p| format!(" if {}", p.source()))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  field      {} = {}{filter} ({:?}, {:?})",
                    f.name,
                    compiled.score.source(),
                    f.aggregate,
                    f.order
                );
            }
        }
    }
    if let Some(s) = &b.scope {
        let _ = writeln!(out, "  scope      {}", s.source());
        let _ = writeln!(out, "  unions     {}", scope_unions_line(b));
    }
    // A composite board's aggregate and order are per field (above).
    let rule = match &b.composite {
        None => format!("aggregate {:?}, order {:?}, ", b.aggregate, b.order),
        Some(_) => String::new(),
    };
    let _ = writeln!(
        out,
        "  ranking    {rule}tie_break {:?}, timezone {}",
        b.tie,
        b.tz.name()
    );
    let _ = writeln!(out, "  range      {}", b.range_description());
    let _ = writeln!(
        out,
        "  keys       {}",
        keys::view_key(&boards.key_prefix, &tag, "<view>")
    );
    for v in &b.views {
        describe_view(out, &boards.key_prefix, &tag, b, v, now);
    }
    warn_undeclared(out, b);
}

/// Warns about each attribute a rule reads that its event schema does not
/// declare: events without it fail that rule.
fn warn_undeclared(out: &mut String, b: &Board) {
    let mut programs = vec![
        ("filter".to_string(), b.filter.as_ref()),
        ("member".to_string(), Some(&b.member)),
        ("scope".to_string(), b.scope.as_ref()),
    ];
    match &b.composite {
        None => programs.push(("score".to_string(), Some(&b.score))),
        Some(c) => {
            for (f, compiled) in c.layout.fields.iter().zip(&c.fields) {
                programs.push((format!("field {}", f.name), Some(&compiled.score)));
                programs.push((format!("field {} filter", f.name), compiled.filter.as_ref()));
            }
        }
    }
    for (field, program) in programs {
        let Some(p) = program else { continue };
        for f in p.fields() {
            if !b.event.declared_fields().contains(&f.as_str()) {
                let _ = writeln!(
                    out,
                    "  warning: {field} reads `{f}`, which the {} schema does not declare; events without it fail this rule",
                    b.event.name()
                );
            }
        }
    }
}

/// One line per view: its current key and how long its keys are kept.
fn describe_view(out: &mut String, prefix: &str, tag: &str, b: &Board, v: &ViewSpec, now: i64) {
    match v {
        ViewSpec::Period {
            kind,
            retention,
            close_after,
        } => {
            let current = period_of(*kind, now, b.tz);
            let keep = match (retention, close_after) {
                (Some(r), Some(grace)) => format!(
                    "archived: closes {} after the period ends, kept in Redis until archived, then {r} after the end",
                    Span::Fixed { ms: *grace }
                ),
                (Some(r), None) => format!("kept {r} after the period ends"),
                (None, _) => "kept forever".to_string(),
            };
            let key = keys::view_key(prefix, tag, &current.view());
            let helpers = helpers_of(b, &key, false, close_after.is_some());
            let _ = if *kind == PeriodKind::All {
                writeln!(out, "    {:<8} {key}  ({keep}{helpers})", kind.name())
            } else {
                writeln!(out, "    {:<8} {key}  (now; {keep}{helpers})", kind.name())
            };
        }
        ViewSpec::Window(w) => {
            let key = keys::view_key(prefix, tag, &w.view());
            let helpers = helpers_of(b, &key, true, false);
            let _ = writeln!(
                out,
                "    {:<8} {key}  (window {}{helpers})",
                w.view(),
                w.text
            );
        }
    }
}

/// "; helpers K:t, ..." for a view's line: what the apply script keeps
/// beside it, bucket hashes and the dense-rank index included.
fn helpers_of(b: &Board, key: &str, window: bool, archived: bool) -> String {
    let mut all = crate::sink::encode::helper_keys(b, key, window, archived);
    if window {
        all.push(format!("{key}:b:<bucket end>"));
    }
    if b.dense_ranks {
        all.push(keys::dense_key(key));
    }
    if all.is_empty() {
        return String::new();
    }
    let suffixes: Vec<&str> = all
        .iter()
        .map(|k| k.strip_prefix(key).unwrap_or(k))
        .collect();
    format!("; helpers K{}", suffixes.join(", K"))
}
