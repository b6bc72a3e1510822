//! Live reads that need more than `ZRANGE`/`ZRANK`: ranks in the
//! competition and dense styles (docs/http-api.md) and the entries of a list of
//! members (a friends board), each one call of the read script
//! (`ranks.lua`), so a page and the counts its ranks come from are one
//! atomic look at the view, in one round trip. The numbering itself is
//! [`Styler`]'s; "equal values" are equal scores, or on a composite board
//! equal tuples of all fields (same score, same field codes).

use std::collections::HashMap;

use redis::Value;

use super::answer::Entry;
use super::error::{BadParam, ReadError};
use super::handle::Reader;
use super::locate::Located;
use super::ranks::{self, DENSE_BUDGET, RankStyle, Styler};
use super::sheet::{DenseLimit, Run, Styles, walk_too_long};
use crate::board::Order;
use crate::board::composite;
use crate::board::keys;
use crate::sink::store::{Store, StoreError};

/// What one read-script call (and its dense continuations) returned.
struct Counted {
    /// Members in the view (0: no key).
    total: u64,
    /// The mode's rows, flat (one array per run in `runs` mode).
    rows: Vec<Value>,
    /// The distinct values asked about, best first: a score as Redis
    /// prints it, or a composite tuple's index entry.
    targets: Vec<String>,
    /// Per target, the count of better members (competition) or distinct
    /// better values (dense; dense when both were asked).
    counts: Vec<u64>,
    /// Per target, the count of better members when both styles were
    /// asked (`runs` mode), else empty.
    competition: Vec<u64>,
    /// Why the dense counts are missing: a composite board's view without
    /// its index, or a walk longer than `[http] max_read_entries`. A walk
    /// cut short still counted the targets it reached.
    refused: Option<BadParam>,
    /// `runs` mode: the dense counts were walked, with this budget in all.
    walked: Option<u64>,
}

/// A call's view size, rows, and counts by target.
type ByTarget = (u64, Vec<Value>, HashMap<String, u64>);

impl Counted {
    /// The view's size, the rows, and the counts by target; the refusal
    /// of dense ranks is an error here.
    fn by_target(self) -> Result<ByTarget, ReadError> {
        if let Some(refused) = self.refused {
            return Err(ReadError::BadRequest(refused));
        }
        let counts = self.targets.into_iter().zip(self.counts).collect();
        Ok((self.total, self.rows, counts))
    }
}

/// One call of the read script on a view: its keys and the arguments
/// every mode starts with.
struct Call {
    keys: [String; 3],
    order: &'static str,
    tie: &'static str,
    code: String,
    indexed: bool,
}

/// A reply of the read script (see `ranks.lua`).
struct Parts {
    total: u64,
    rows: Vec<Value>,
    targets: Vec<String>,
    counts: Vec<u64>,
    resume: Vec<Value>,
    /// The competition counts of `runs` mode with both styles.
    competition: Vec<u64>,
    /// `runs` mode: the dense counts were walked (the view has no usable
    /// index).
    walked: bool,
}

impl Call {
    fn of(at: &Located<'_>) -> Call {
        let board = at.board;
        let helper = keys::helper(&at.key, composite::helper_of(board).unwrap_or("t"));
        Call {
            keys: [at.key.clone(), helper, keys::dense_key(&at.key)],
            order: order_name(board.order),
            tie: board.tie_key.code(),
            code: board
                .composite
                .as_ref()
                .map(|c| c.layout.script_code())
                .unwrap_or_default(),
            indexed: board.dense_ranks,
        }
    }

    fn args(&self, mode: &str, style: &str, budget: u64) -> Vec<String> {
        vec![
            mode.to_string(),
            self.order.to_string(),
            style.to_string(),
            budget.to_string(),
            self.tie.to_string(),
            self.code.clone(),
            if self.indexed { "1" } else { "0" }.to_string(),
        ]
    }

    async fn eval(&self, store: &Store, args: &[String]) -> Result<Parts, StoreError> {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let mut all: Vec<Value> = convert(ranks::eval(store, &keys, args).await?)?;
        // `runs` mode adds the competition counts and the walked flag.
        let (competition, walked) = match all.len() {
            7 => {
                let walked: u8 = convert(all.remove(6))?;
                (convert(all.remove(5))?, walked == 1)
            }
            _ => (Vec::new(), false),
        };
        let (total, rows, targets, counts, resume): Reply = convert(Value::Array(all))?;
        Ok(Parts {
            total,
            rows,
            targets,
            counts,
            resume,
            competition,
            walked,
        })
    }
}

fn no_index(board: &str) -> BadParam {
    BadParam::new(
        "rank",
        format!(
            "rank=dense on composite board {board} needs the view's dense-rank index, which this period does not have (board option dense_ranks = false, or the period began before the index was kept); use rank=competition or rank=ordinal"
        ),
    )
}

/// A list of members read from Redis.
pub(super) struct LiveMembers {
    pub(crate) total: u64,
    /// In rank order, ranked in the style asked for.
    pub(crate) entries: Vec<Entry>,
}

fn order_name(order: Order) -> &'static str {
    match order {
        Order::Desc => "desc",
        Order::Asc => "asc",
    }
}

fn convert<T: redis::FromRedisValue>(v: Value) -> Result<T, StoreError> {
    redis::from_redis_value(v).map_err(|e| StoreError::Protocol(e.to_string()))
}

type Reply = (u64, Vec<Value>, Vec<String>, Vec<u64>, Vec<Value>);

impl Reader {
    /// Runs the read script in `mode` with `extra` arguments, then, while
    /// a dense walk ran out of budget, continues it in further calls (each
    /// bounded; the whole is then no longer one atomic look, which only a
    /// board changing during a very long walk could notice). A walk is
    /// given `[http] max_read_entries` steps in all: one that needs more
    /// stops there, its dense counts refused.
    async fn counted(
        &self,
        at: &Located<'_>,
        mode: &str,
        style: &str,
        extra: Vec<String>,
    ) -> Result<Counted, ReadError> {
        let call = Call::of(at);
        let max = self.max_read_entries.max(1);
        let mut budget = DENSE_BUDGET.min(max);
        let mut args = call.args(mode, style, budget);
        args.extend(extra);
        let Parts {
            total,
            rows,
            targets,
            mut counts,
            mut resume,
            competition,
            walked,
        } = call.eval(&self.store, &args).await?;
        let mut refused = (resume.len() == 1).then(|| no_index(&at.board.name));
        let mut spent = 0;
        while let [count, bound] = resume.as_slice() {
            spent += budget;
            if spent >= max {
                refused = Some(walk_too_long(&at.board.name, max));
                break;
            }
            budget = DENSE_BUDGET.min(max - spent);
            let done = counts.len().min(targets.len());
            tracing::debug!(
                key = %at.key,
                done,
                left = targets.len() - done,
                "A dense rank walk ran out of its per-call budget; continuing it."
            );
            let mut args = call.args("walk", "dense", budget);
            args.push(convert::<u64>(count.clone())?.to_string());
            args.push(convert::<String>(bound.clone())?);
            args.extend(targets[done..].iter().cloned());
            let more = call.eval(&self.store, &args).await?;
            counts.extend(more.counts);
            resume = more.resume;
        }
        Ok(Counted {
            total,
            rows,
            targets,
            counts,
            competition,
            refused,
            walked: walked.then_some(max),
        })
    }

    /// 0-based ranks `start ..= stop` ranked in `style`, and the view's
    /// size, in one call.
    pub(super) async fn styled_range(
        &self,
        at: &Located<'_>,
        start: u64,
        stop: u64,
        style: RankStyle,
    ) -> Result<(u64, Vec<Entry>), ReadError> {
        let extra = vec![start.to_string(), stop.to_string()];
        let counted = self.counted(at, "range", style.name(), extra).await?;
        let (total, rows, counts) = counted.by_target()?;
        let raw: Vec<(Vec<u8>, f64)> = convert(Value::Array(rows))?;
        let groups = value_groups(at, &raw);
        let mut entries = self.entries(at, start, raw);
        // The script counted the page's first value (its only target).
        let better = counts.values().next().copied().unwrap_or(0);
        debug_assert!(counts.len() <= 1);
        let ranked: Vec<(u64, u64)> = entries.iter().map(|e| e.rank).zip(groups).collect();
        for (e, rank) in entries
            .iter_mut()
            .zip(Styler::new(style, better).page(&ranked))
        {
            e.rank = rank;
        }
        Ok((total, entries))
    }

    /// `runs` (0-based ranks, inclusive, in rank order and apart) in one
    /// call, each with its ranks in `styles` (see [`Run`]): the view's
    /// size, the runs, and why dense ranks were refused, if they were.
    pub(super) async fn styled_runs(
        &self,
        at: &Located<'_>,
        runs: &[(u64, u64)],
        styles: Styles,
    ) -> Result<(u64, Vec<Run>, DenseLimit), ReadError> {
        let extra = runs
            .iter()
            .flat_map(|(a, b)| [a.to_string(), b.to_string()])
            .collect();
        let counted = self.counted(at, "runs", styles.arg(), extra).await?;
        let (competition, dense) = match (styles.competition, styles.dense) {
            (true, true) => (counted.competition, counted.counts),
            (true, false) => (counted.counts, Vec::new()),
            _ => (Vec::new(), counted.counts),
        };
        let limit = DenseLimit {
            refused: counted.refused,
            walked: counted.walked,
        };
        let mut out = Vec::with_capacity(runs.len());
        // The targets are the first values of the runs that are not empty.
        let mut first = 0;
        for (&(start, stop), rows) in runs.iter().zip(counted.rows) {
            let raw: Vec<(Vec<u8>, f64)> = convert(rows)?;
            let groups = value_groups(at, &raw);
            let entries = self.entries(at, start, raw);
            let ranked: Vec<(u64, u64)> = entries.iter().map(|e| e.rank).zip(groups).collect();
            // A refused walk still counted the runs it reached, those
            // whose first value is within its budget: the others have no
            // dense ranks.
            let styled = |wanted: bool, style: RankStyle, counts: &[u64]| {
                if !wanted || ranked.is_empty() {
                    return Ok(Vec::new());
                }
                match counts.get(first) {
                    Some(&better) => Ok(Styler::new(style, better).page(&ranked)),
                    None if style == RankStyle::Dense && limit.refused.is_some() => Ok(Vec::new()),
                    None => Err(StoreError::Protocol(format!(
                        "no {} count for run {start}",
                        style.name()
                    ))),
                }
            };
            out.push(Run {
                start,
                stop,
                competition: styled(styles.competition, RankStyle::Competition, &competition)?,
                dense: styled(styles.dense, RankStyle::Dense, &dense)?,
                entries,
            });
            first += usize::from(!ranked.is_empty());
        }
        Ok((counted.total, out, limit))
    }

    /// The entries of those of `ids` (distinct) that are in the view, in
    /// rank order and ranked in `style`, in one call.
    pub(super) async fn live_members(
        &self,
        at: &Located<'_>,
        ids: &[String],
        style: RankStyle,
    ) -> Result<LiveMembers, ReadError> {
        let counted = self
            .counted(at, "members", style.name(), ids.to_vec())
            .await?;
        let (total, rows, counts) = counted.by_target()?;
        let mut found = Vec::with_capacity(rows.len() / 5);
        for row in rows.chunks(5) {
            let [index, rank, score, target, stored] = row else {
                return Err(StoreError::Protocol("a members row is not 5 values".into()).into());
            };
            let index: usize = convert(index.clone())?;
            let rank: u64 = convert(rank.clone())?;
            let score: String = convert(score.clone())?;
            let target: String = convert(target.clone())?;
            let stored: Vec<u8> = convert(stored.clone())?;
            let Some(member) = index.checked_sub(1).and_then(|i| ids.get(i)) else {
                return Err(StoreError::Protocol(format!("no id at index {index}")).into());
            };
            let value: f64 = score
                .parse()
                .map_err(|_| StoreError::Protocol(format!("score {score:?} is not a number")))?;
            let shown = match style {
                RankStyle::Ordinal => rank + 1,
                _ => counts.get(&target).copied().unwrap_or(0) + 1,
            };
            let (_, fields) =
                composite::read_entry(at.board, &String::from_utf8_lossy(&stored), value);
            found.push((
                rank,
                Entry {
                    rank: shown,
                    member: member.clone(),
                    score: value,
                    fields,
                },
            ));
        }
        // In the board's order (ordinal ranks are distinct; styled ranks
        // grow with them).
        found.sort_by_key(|(ordinal, _)| *ordinal);
        Ok(LiveMembers {
            total,
            entries: found.into_iter().map(|(_, e)| e).collect(),
        })
    }
}

/// For a page's rows (stored member, score) in rank order, a number per row
/// that changes exactly where the value changes: the score, and on a
/// composite board the field codes in front of the member too (its tie
/// group), so that tied means all fields equal.
fn value_groups(at: &Located<'_>, raw: &[(Vec<u8>, f64)]) -> Vec<u64> {
    let codes = |stored: &[u8]| -> Vec<u8> {
        match &at.board.composite {
            Some(c) => stored
                .get(..c.layout.codes_len())
                .unwrap_or(stored)
                .to_vec(),
            None => Vec::new(),
        }
    };
    let mut out = Vec::with_capacity(raw.len());
    let mut prev: Option<(f64, Vec<u8>)> = None;
    let mut group = 0u64;
    for (stored, score) in raw {
        let key = (*score, codes(stored));
        if prev.as_ref().is_some_and(|p| *p != key) {
            group += 1;
        }
        prev = Some(key);
        out.push(group);
    }
    out
}
