//! The due set in Redis (`{prefix}:archive:due`, docs/history.md): which
//! periods of archived views wait to be archived, and the Redis side of the
//! archiver's steps on one of them: list what is due, measure the backlog,
//! close a period (marker set, expiry removed), restore its expiry and
//! remove the item. Every step is idempotent, so any instance may redo any
//! of them after a crash.
//!
//! Each step is a few single-key commands rather than one Lua script or
//! `MULTI`: the Redis ACL rankflow documents grants neither `EVAL` nor
//! `MULTI`, and no step needs atomicity. What matters is the order: the
//! marker is set (and acknowledged) before the standings are read, so the
//! apply script refuses every later update and the read is of a frozen key.

use std::collections::HashMap;

use crate::board::BoardSet;
use crate::board::Order;
use crate::board::composite::Layout;
use crate::board::duration::add_span;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, parse_period_id};
use crate::board::score::TieKey;
use crate::board::serving::ServingMap;
use crate::sink::store::Store;

use super::ArchiveError;
use super::copy::PeriodKey;

/// One entry of the due set.
#[derive(Debug, Clone, PartialEq)]
pub struct DueItem {
    /// `{<tag>}:<view id>` ([`keys::due_member`]).
    pub member: String,
    /// Close time (period end + grace), ms.
    pub close_ms: i64,
}

/// A due item resolved against the boards: everything the steps need.
#[derive(Debug, Clone)]
pub struct DuePeriod {
    pub(crate) member: String,
    pub(crate) key: PeriodKey,
    /// The period's sorted set `K`.
    pub(crate) view_key: String,
    /// Its twin `K~h`, the members hidden from it (docs/moderation.md).
    pub(crate) twin_key: String,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) close_ms: i64,
    /// When the keys go once archived (end + retention); `None` keeps them.
    pub(crate) expire_at: Option<i64>,
    pub(crate) order: Order,
    pub(crate) tie_key: TieKey,
    /// A composite board's encoding (its fields are archived too).
    pub(crate) layout: Option<Layout>,
}

impl DuePeriod {
    /// The names of a composite board's fields in rank order, as the
    /// archive records them; `None` for other boards.
    pub(crate) fn field_names(&self) -> Option<Vec<String>> {
        self.layout
            .as_ref()
            .map(|l| l.fields.iter().map(|f| f.name.clone()).collect())
    }

    /// `K:closed`, the marker the apply script checks.
    pub(crate) fn closed_key(&self) -> String {
        keys::closed_key(&self.view_key)
    }
}

/// The backlog: due items whose close time has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Backlog {
    pub(crate) pending: u64,
    /// Close time of the oldest pending item.
    pub(crate) oldest_close_ms: Option<i64>,
}

impl Backlog {
    /// How long past its close the oldest pending item is, in seconds.
    pub(crate) fn oldest_age_secs(&self, now_ms: i64) -> f64 {
        self.oldest_close_ms
            .map_or(0.0, |c| (now_ms - c).max(0) as f64 / 1000.0)
    }
}

fn redis(e: crate::sink::store::StoreError) -> ArchiveError {
    ArchiveError::redis(e)
}

/// Up to `limit` items closed at `now_ms`, oldest first.
pub(crate) async fn list_due(
    store: &Store,
    prefix: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<DueItem>, ArchiveError> {
    let items: Vec<(String, f64)> = store
        .query(
            redis::cmd("ZRANGEBYSCORE")
                .arg(keys::archive_due_key(prefix))
                .arg("-inf")
                .arg(now_ms)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(limit),
        )
        .await
        .map_err(redis)?;
    Ok(items
        .into_iter()
        .map(|(member, score)| DueItem {
            member,
            close_ms: score as i64,
        })
        .collect())
}

/// Every item in the due set, due or not (for `rankflow archive --period`).
pub(crate) async fn list_all(store: &Store, prefix: &str) -> Result<Vec<DueItem>, ArchiveError> {
    list_due(store, prefix, i64::MAX, usize::MAX >> 1).await
}

/// How many items are past their close time and how old the oldest is.
/// Counted without `ZCOUNT` (not in rankflow's ACL): the rank of the first
/// item still to close is the number of items before it.
pub(crate) async fn backlog(
    store: &Store,
    prefix: &str,
    now_ms: i64,
) -> Result<Backlog, ArchiveError> {
    let key = keys::archive_due_key(prefix);
    let oldest: Vec<(String, f64)> = store
        .query(
            redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES"),
        )
        .await
        .map_err(redis)?;
    let Some(oldest_close) = oldest.first().map(|(_, s)| *s as i64) else {
        return Ok(Backlog::default());
    };
    if oldest_close > now_ms {
        return Ok(Backlog::default());
    }
    let next: Vec<String> = store
        .query(
            redis::cmd("ZRANGEBYSCORE")
                .arg(&key)
                .arg(format!("({now_ms}"))
                .arg("+inf")
                .arg("LIMIT")
                .arg(0)
                .arg(1),
        )
        .await
        .map_err(redis)?;
    let pending: u64 = match next.first() {
        Some(m) => {
            let rank: Option<u64> = store
                .query(redis::cmd("ZRANK").arg(&key).arg(m))
                .await
                .map_err(redis)?;
            // Removed meanwhile: the count is a gauge, the next tick fixes it.
            rank.unwrap_or(0)
        }
        None => store
            .query(redis::cmd("ZCARD").arg(&key))
            .await
            .map_err(redis)?,
    };
    Ok(Backlog {
        pending,
        oldest_close_ms: Some(oldest_close),
    })
}

/// Resolves a due item against the configured boards.
pub fn resolve(boards: &BoardSet, prefix: &str, item: &DueItem) -> Result<DuePeriod, ArchiveError> {
    let bad = |reason: String| ArchiveError::Due {
        member: item.member.clone(),
        reason,
    };
    let (tag, view_id) =
        keys::parse_due_member(&item.member).ok_or_else(|| bad("not `{tag}:view:id`".into()))?;
    let (board_name, scope) =
        keys::parse_tag(tag).ok_or_else(|| bad("its scope is wrongly escaped".into()))?;
    let (_, board) = boards.by_stored(board_name).ok_or_else(|| {
        bad(format!(
            "no configured board's keys carry the name {board_name:?}"
        ))
    })?;
    let (kind_name, period_id) = view_id
        .split_once(':')
        .ok_or_else(|| bad(format!("view {view_id:?} is not a period")))?;
    let kind = PeriodKind::parse(kind_name)
        .filter(|k| *k != PeriodKind::All)
        .ok_or_else(|| bad(format!("view {view_id:?} is not a closing period")))?;
    let (retention, grace) = period_view(board, kind)
        .ok_or_else(|| bad(format!("board {board_name:?} has no {kind_name} view")))?;
    let period = parse_period_id(kind, period_id, board.tz).map_err(|e| bad(e.to_string()))?;
    let end_ms = period.end_ms.unwrap_or(i64::MAX);
    // The grace configured now decides, whatever the score was written
    // with (a grace changed since: docs/history.md).
    let close_ms = match grace {
        Some(g) => end_ms.saturating_add(g),
        None => item.close_ms,
    };
    Ok(DuePeriod {
        member: item.member.clone(),
        key: PeriodKey {
            board: board.name.clone(),
            scope: scope.unwrap_or_default(),
            view: kind_name.to_string(),
            period: period.id.clone(),
        },
        view_key: keys::view_key(prefix, tag, view_id),
        twin_key: keys::twin_view_key(prefix, tag, view_id),
        start_ms: period.start_ms,
        end_ms,
        close_ms,
        expire_at: retention.map(|r| add_span(end_ms, &r, board.tz)),
        order: board.order,
        tie_key: board.tie_key,
        layout: board.composite.as_ref().map(|c| c.layout.clone()),
    })
}

/// The retention (`None`: kept forever) and the grace (`None`: not
/// archived) of the board's view of `kind`; `None` if it has no such view.
type PeriodView = (Option<crate::board::duration::Span>, Option<i64>);

fn period_view(board: &Board, kind: PeriodKind) -> Option<PeriodView> {
    board.views.iter().find_map(|v| match v {
        ViewSpec::Period {
            kind: k,
            retention,
            close_after,
        } if *k == kind => Some((*retention, *close_after)),
        _ => None,
    })
}

/// Makes the due set's close times those of `grace_ms` (the configured
/// `[archive] grace`) if they were computed with another: each item's
/// score becomes its period's end + the grace of its view, page by page
/// (`ZSCAN`, `ZADD XX`: an item removed meanwhile is not brought back),
/// then the grace is recorded. Items this configuration cannot resolve
/// keep their score. Returns how many items were rescored (0 when the
/// recorded grace was already this one). Any archiver may run it at the
/// same time as another: both write the same scores.
pub(crate) async fn sync_grace(
    store: &Store,
    boards: &BoardSet,
    prefix: &str,
    grace_ms: i64,
) -> Result<u64, ArchiveError> {
    let grace_key = keys::archive_grace_key(prefix);
    let recorded: Option<String> = store
        .query(redis::cmd("GET").arg(&grace_key))
        .await
        .map_err(redis)?;
    if recorded.and_then(|g| g.parse::<i64>().ok()) == Some(grace_ms) {
        return Ok(0);
    }
    let due_key = keys::archive_due_key(prefix);
    let mut cursor = 0u64;
    let mut rescored = 0u64;
    loop {
        let (next, page): (u64, Vec<(String, f64)>) = store
            .query(
                redis::cmd("ZSCAN")
                    .arg(&due_key)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(500),
            )
            .await
            .map_err(redis)?;
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&due_key).arg("XX");
        let mut changed = 0u64;
        for (member, score) in page {
            let item = DueItem {
                member,
                close_ms: score as i64,
            };
            if let Ok(p) = resolve(boards, prefix, &item)
                && p.close_ms != item.close_ms
            {
                zadd.arg(p.close_ms).arg(&item.member);
                changed += 1;
            }
        }
        if changed > 0 {
            let _: i64 = store.query(&zadd).await.map_err(redis)?;
            rescored += changed;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let _: () = store
        .query(redis::cmd("SET").arg(&grace_key).arg(grace_ms))
        .await
        .map_err(redis)?;
    Ok(rescored)
}

/// Moves one item to its close time (`ZADD XX`): an item the due set
/// listed as due by a score older than the configured grace.
pub(crate) async fn reschedule(
    store: &Store,
    prefix: &str,
    p: &DuePeriod,
) -> Result<(), ArchiveError> {
    postpone(store, prefix, p, p.close_ms).await
}

/// The same period read from `shadow`, the board promoted in place of
/// `p`'s board (docs/rebuilds.md): its keys and encoding, archived under
/// `p`'s board name, so that periods closing after a promotion are
/// archived from the data every reader was served.
pub(crate) fn served_by(mut p: DuePeriod, prefix: &str, shadow: &Board) -> DuePeriod {
    let scope = (!p.key.scope.is_empty()).then_some(p.key.scope.as_str());
    let tag = shadow.tag(scope);
    let view_id = format!("{}:{}", p.key.view, p.key.period);
    p.view_key = keys::view_key(prefix, &tag, &view_id);
    p.twin_key = keys::twin_view_key(prefix, &tag, &view_id);
    p.order = shadow.order;
    p.tie_key = shadow.tie_key;
    p.layout = shadow.composite.as_ref().map(|c| c.layout.clone());
    p
}

/// The promotions in force (`<prefix>:serving`).
pub(crate) async fn serving(store: &Store, boards: &BoardSet) -> Result<ServingMap, ArchiveError> {
    let raw: HashMap<String, String> = store
        .query(redis::cmd("HGETALL").arg(keys::serving_key(&boards.key_prefix)))
        .await
        .map_err(redis)?;
    Ok(crate::board::serving::parse(raw, boards))
}

/// Moves one item on to `until` (`ZADD XX`, so an item removed meanwhile
/// is not brought back): a shadow board's period, which its backfill may
/// still be writing to, or an item listed by an older grace.
pub(crate) async fn postpone(
    store: &Store,
    prefix: &str,
    p: &DuePeriod,
    until: i64,
) -> Result<(), ArchiveError> {
    let _: i64 = store
        .query(
            redis::cmd("ZADD")
                .arg(keys::archive_due_key(prefix))
                .arg("XX")
                .arg(until)
                .arg(&p.member),
        )
        .await
        .map_err(redis)?;
    Ok(())
}

/// Step 1: closes the period (marker `K:closed` = close time, then no
/// expiry on `K`, `K:t` and `K:f`, nor on its twin's, while it is
/// archived: live reads of a composite member need its `K:f` entry as long
/// as `K` is there) and returns how many members it has, hidden ones
/// included (0: the period had no events).
pub(crate) async fn close(store: &Store, p: &DuePeriod) -> Result<u64, ArchiveError> {
    // The marker first: once Redis has it, no update reaches K or its twin.
    let _: () = store
        .query(redis::cmd("SET").arg(p.closed_key()).arg(p.close_ms))
        .await
        .map_err(redis)?;
    for view in [&p.view_key, &p.twin_key] {
        for key in [
            view.clone(),
            keys::helper(view, "t"),
            keys::helper(view, "f"),
        ] {
            let _: i64 = store
                .query(redis::cmd("PERSIST").arg(key))
                .await
                .map_err(redis)?;
        }
    }
    let mut members = 0;
    for view in [&p.view_key, &p.twin_key] {
        let n: u64 = store
            .query(redis::cmd("ZCARD").arg(view))
            .await
            .map_err(redis)?;
        members += n;
    }
    Ok(members)
}

/// Before step 1, and again before the copy commits: the moderation
/// record's generation, or `None` while a member action is under way
/// (docs/moderation.md). A copy whose two readings are not the same
/// `Some` crossed an action, whose moves may have shifted members between
/// `K` and its twin while they were read, and is not committed.
pub(crate) async fn actions_settled(
    store: &Store,
    prefix: &str,
    now_ms: i64,
) -> Result<Option<i64>, ArchiveError> {
    let live: Vec<String> = store
        .query(
            redis::cmd("ZRANGEBYSCORE")
                .arg(keys::actions_key(prefix))
                .arg(format!("({now_ms}"))
                .arg("+inf")
                .arg("LIMIT")
                .arg(0)
                .arg(1),
        )
        .await
        .map_err(redis)?;
    if !live.is_empty() {
        return Ok(None);
    }
    let generation: Option<i64> = store
        .query(
            redis::cmd("HGET")
                .arg(keys::moderation_key(prefix))
                .arg(crate::moderation::GEN_FIELD),
        )
        .await
        .map_err(redis)?;
    Ok(Some(generation.unwrap_or(0)))
}

/// Whether no member action is under way and the record is still at
/// `generation` (read by [`actions_settled`] before step 1).
pub(crate) async fn still_settled(
    store: &Store,
    prefix: &str,
    now_ms: i64,
    generation: i64,
) -> Result<bool, ArchiveError> {
    Ok(actions_settled(store, prefix, now_ms).await? == Some(generation))
}

/// Step 5: the keys (marker included) expire at end + retention again; at
/// once if that has passed. Nothing to do for views kept forever.
pub(crate) async fn restore_expiry(store: &Store, p: &DuePeriod) -> Result<(), ArchiveError> {
    let Some(at) = p.expire_at else {
        return Ok(());
    };
    // K:f too: step 1 persisted it with K (composite boards). The
    // dense-rank index (K:v) follows its view key (no-op when absent).
    let mut expiring = vec![p.closed_key()];
    for view in [&p.view_key, &p.twin_key] {
        expiring.extend([
            view.clone(),
            keys::helper(view, "t"),
            keys::helper(view, "f"),
            keys::dense_key(view),
        ]);
    }
    for key in &expiring {
        let _: i64 = store
            .query(redis::cmd("PEXPIREAT").arg(key).arg(at))
            .await
            .map_err(redis)?;
    }
    Ok(())
}

/// Step 6: the item leaves the due set.
pub(crate) async fn remove(store: &Store, prefix: &str, member: &str) -> Result<(), ArchiveError> {
    let _: i64 = store
        .query(
            redis::cmd("ZREM")
                .arg(keys::archive_due_key(prefix))
                .arg(member),
        )
        .await
        .map_err(redis)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// Boards compiled with an `[archive]` section (test_boards has none).
    pub(crate) fn archived_boards(boards: &str) -> BoardSet {
        let text = format!(
            "[kafka]\nbrokers = \"b\"\ntopics = [\"t\"]\n[redis]\nurl = \"redis://127.0.0.1:1\"\n\
             [archive]\nurl = \"postgres://u@127.0.0.1:1/db\"\n{boards}"
        );
        Config::from_toml(&text, std::path::Path::new("test.toml"), Vec::new())
            .and_then(|c| c.compile_boards())
            .expect("test boards compile")
    }

    const BOARDS: &str = r#"
[[board]]
name = "fans"
event = "gift"
member = "sender"
score = "amount"
scope = "receiver"
periods = ["week", "month"]
archive = ["week"]
tie_break = "earliest"
retention = { week = "2w" }
"#;

    fn item(member: &str) -> DueItem {
        DueItem {
            member: member.into(),
            close_ms: 1,
        }
    }

    #[test]
    fn resolves_a_scoped_week() {
        let boards = archived_boards(BOARDS);
        let tag = keys::instance_tag("fans", Some("a:b"));
        let member = keys::due_member(&tag, "week:2026-W47");
        let p = resolve(&boards, "rf", &item(&member)).unwrap();
        assert_eq!(p.key.path(), "fans/a:b/week/2026-W47");
        assert_eq!(p.view_key, "rf:{fans:a%3Ab}:week:2026-W47");
        // 2026-W47 is Mon 2026-11-16 .. Mon 2026-11-23 (UTC), kept 2 weeks.
        assert_eq!(p.start_ms, 1_794_787_200_000);
        assert_eq!(p.end_ms, 1_795_392_000_000);
        assert_eq!(p.expire_at, Some(1_795_392_000_000 + 14 * 86_400_000));
        assert_eq!(p.tie_key, TieKey::Descending);
        assert_eq!(p.closed_key(), "rf:{fans:a%3Ab}:week:2026-W47:closed");
    }

    /// A board that took over a shadow's keys (`stored_as`): its periods'
    /// due items name those keys, and are archived under its own name.
    #[test]
    fn a_taken_over_boards_items_resolve_to_it() {
        let boards = archived_boards(&BOARDS.replace(
            "name = \"fans\"",
            "name = \"fans\"\nstored_as = \"fans_v2\"",
        ));
        let p = resolve(&boards, "rf", &item("{fans_v2:x}:week:2026-W47")).expect("resolves");
        assert_eq!((p.key.board.as_str(), p.key.scope.as_str()), ("fans", "x"));
        assert_eq!(p.view_key, "rf:{fans_v2:x}:week:2026-W47");
        let e = resolve(&boards, "rf", &item("{fans:x}:week:2026-W47")).unwrap_err();
        assert!(e.to_string().contains("carry the name \"fans\""), "{e}");
    }

    #[test]
    fn unusable_items_are_named() {
        let boards = archived_boards(BOARDS);
        for (member, why) in [
            (
                "{nope}:week:2026-W47",
                "no configured board's keys carry the name \"nope\"",
            ),
            ("{fans:x}:day:2026-11-20", "has no day view"),
            ("{fans:x}:week:2026-W99", "does not exist"),
            ("fans:week", "not `{tag}:view:id`"),
            ("{fans:x}:all", "not a period"),
        ] {
            let e = resolve(&boards, "rf", &item(member)).unwrap_err();
            assert!(e.to_string().contains(why), "{member}: {e}");
            assert_eq!(e.kind(), "due");
        }
    }

    #[test]
    fn backlog_age_is_zero_without_items() {
        assert_eq!(Backlog::default().oldest_age_secs(5_000), 0.0);
        let b = Backlog {
            pending: 1,
            oldest_close_ms: Some(1_000),
        };
        assert_eq!(b.oldest_age_secs(4_500), 3.5);
    }
}
