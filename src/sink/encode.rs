//! Encoding a batch's updates as calls of `lua/apply.lua`. Each board
//! instance's share is its keys (fence, then every view with its helper
//! keys, and for a period of an archived view its `K:closed` marker) and
//! arguments (rules, partition groups with offset ranges, views, then the
//! updates pre-aggregated per (partition, view, member, bucket), packed in
//! one binary argument per view); [`crate::sink::call`] cuts the shares
//! into calls.
//!
//! The layout is documented at the top of `apply.lua`; the two must change
//! together.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use crate::board::Aggregate;
use crate::board::BoardSet;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::moderation::{BatchRoutes, Route, Snapshot};

use super::aggregate::{Agg, FieldAggs, combine_fields};
use super::call::{Call, Encoded, Grouping, MAX_UPDATES_PER_CALL, Member, group_of, pack};
use super::expiry::ExpiryCache;
use super::updates::{FastMap, Instance, Updates};

fn agg_code(a: Aggregate) -> &'static str {
    match a {
        Aggregate::Sum => "sum",
        Aggregate::Max => "max",
        Aggregate::Min => "min",
        Aggregate::Last => "last",
    }
}

/// Appends a view's keys in the order `apply.lua` binds them. `archived`:
/// a period of an archived view, whose closed marker comes last.
fn push_view_keys(
    keys_out: &mut Vec<String>,
    board: &Board,
    key: String,
    window: bool,
    archived: bool,
) {
    let extra = helper_keys(board, &key, window, archived);
    keys_out.push(key);
    keys_out.extend(extra);
}

/// The helper keys of a view the apply script is given, in its order
/// (`rankflow check` lists them too). Not among them: window buckets
/// (`K:b:<end>`) and the dense-rank index (`K:v`), which the script
/// derives from `K`, in the same slot.
pub(crate) fn helper_keys(board: &Board, key: &str, window: bool, archived: bool) -> Vec<String> {
    let helper = |suffix: &str| keys::helper(key, suffix);
    let mut extra = Vec::new();
    if board.needs_time() {
        extra.push(helper("t"));
    }
    if board.composite.is_some() {
        extra.push(helper("f"));
    }
    if archived {
        extra.push(keys::closed_key(key));
    }
    if window {
        extra.push(helper("log"));
        // Composite windows count no buckets per member: a field's time
        // tells when its last bucket leaves (see `cevict` in apply.lua).
        if board.composite.is_none() {
            extra.push(helper("n"));
        }
        if uses_ord(board) {
            extra.push(helper("ord"));
        }
        extra.push(helper("cut"));
    }
    extra
}

/// Whether a board's windows keep the per-member best-bucket index `K:ord`:
/// max/min boards, and composite boards with a max or min field.
fn uses_ord(board: &Board) -> bool {
    match &board.composite {
        Some(c) => c
            .layout
            .fields
            .iter()
            .any(|f| matches!(f.aggregate, Aggregate::Max | Aggregate::Min)),
        None => matches!(board.aggregate, Aggregate::Max | Aggregate::Min),
    }
}

/// A board's rules as the script reads them: the aggregate code (a
/// composite board's field rules), then the tie code with `-` after it
/// when the board keeps no dense-rank index (K:v).
pub(crate) fn rule_codes(board: &Board) -> [Vec<u8>; 2] {
    let agg = match &board.composite {
        Some(c) => c.layout.script_code().into(),
        None => agg_code(board.aggregate).into(),
    };
    let dense = if board.dense_ranks { "" } else { "-" };
    [agg, format!("{}{dense}", board.tie_key.code()).into()]
}

fn push_header(args: &mut Vec<Vec<u8>>, board: &Board, fence_expire: &str) {
    args.extend(rule_codes(board));
    args.push(fence_expire.into());
}

/// The fence-hash field holding the |delta| bound of a plain-sum period
/// view's kind (`~abs:day`), or `None` when the board is not a plain sum.
fn bound_field(board: &Board, view_id: &str) -> Option<String> {
    if board.aggregate != Aggregate::Sum || board.tie_key.code() != "n" || board.composite.is_some()
    {
        return None;
    }
    let kind = view_id.split(':').next().unwrap_or(view_id);
    Some(format!("~abs:{kind}"))
}

/// Shortest text that parses back to the same double (Lua's `tonumber`
/// reads it exactly).
fn num(v: f64) -> String {
    let mut out = String::new();
    let _ = write!(out, "{v}");
    out
}

/// When an instance's fences may expire: -1 (never) with an unbounded
/// view, else with the longest-lived view of the batch. Archived periods
/// count with their `end + retention` though their keys carry no expiry
/// while they wait for the archiver: they take no update past their close,
/// which comes before that.
fn fence_expire(board: &Board, inst: &Instance) -> i64 {
    if board.has_unbounded_view() {
        -1
    } else {
        inst.views.iter().map(|v| v.keep_until).max().unwrap_or(0)
    }
}

/// An instance's updates left to send: offsets per partition (lo, hi)
/// for the fences, and the updates merged per (view, member, bucket).
struct Merged {
    groups: BTreeMap<u16, (i64, i64)>,
    /// (view, member index into the batch's members, bucket) → update.
    updates: FastMap<(u16, u32, i64), Pending>,
}

/// A member's merged update of one view: the value (and, for a composite
/// board, every field).
type Pending = (Agg, Option<Box<FieldAggs>>);

/// Merges an instance's updates across partitions, leaving out those at or
/// below the fences learnt (`fences`: partition index → fence). The script
/// applies the instance's groups together or not at all, so a member gets
/// one update per view however many partitions its events came from.
///
/// With `routes` (someone is hidden or erased), a hidden member's update
/// goes to the twin of its view, numbered `views + view`, and an erased
/// member's is left out; its offset still counts in its group, so the
/// fences move past it and a redelivery finds it applied.
fn merge(
    board_index: usize,
    board: &Board,
    inst: &Instance,
    fences: &HashMap<u16, i64>,
    routes: Option<&BatchRoutes<'_>>,
) -> Merged {
    let mut groups: BTreeMap<u16, (i64, i64)> = BTreeMap::new();
    // Sized for every update at once: growing it step by step rehashed it
    // several times per instance, a batch's largest map work at small batches.
    let mut updates: FastMap<(u16, u32, i64), Pending> =
        FastMap::with_capacity_and_hasher(inst.updates.len(), Default::default());
    let views = inst.views.len() as u16;
    for u in &inst.updates {
        if fences.get(&u.part).is_some_and(|&f| u.offset <= f) {
            continue;
        }
        let g = groups.entry(u.part).or_insert((u.offset, u.offset));
        g.0 = g.0.min(u.offset);
        g.1 = g.1.max(u.offset);
        let view = match routes.map(|r| r.route(board_index, u.member)) {
            None | Some(Route::Visible) => u.view,
            Some(Route::Hidden) => views + u.view,
            Some(Route::Erased) => continue,
        };
        updates
            .entry((view, u.member, u.bucket_end))
            .and_modify(|(a, fields)| {
                a.combine(board.aggregate, u.agg);
                if let (Some(acc), Some(other), Some(c)) = (fields, &u.fields, &board.composite) {
                    combine_fields(&c.layout, acc, other);
                }
            })
            .or_insert_with(|| (u.agg, u.fields.clone()));
    }
    Merged { groups, updates }
}

/// The views of an instance's call: the instance's, then the twins that
/// updates of hidden members go to (only those: a twin costs its keys), as
/// (view index, twin); and per update view number (twins numbered past the
/// views) its place among them.
fn call_views(nviews: usize, merged: &Merged) -> (Vec<(usize, bool)>, Vec<u16>) {
    let mut twins: Vec<bool> = vec![false; nviews];
    for (view, _, _) in merged.updates.keys() {
        if let Some(t) = (*view as usize).checked_sub(nviews) {
            twins[t] = true;
        }
    }
    let mut views: Vec<(usize, bool)> = (0..nviews).map(|v| (v, false)).collect();
    views.extend((0..nviews).filter(|&v| twins[v]).map(|v| (v, true)));
    let mut position = vec![0u16; 2 * nviews];
    for (i, (v, twin)) in views.iter().enumerate() {
        position[if *twin { nviews + v } else { *v }] = i as u16;
    }
    (views, position)
}

/// Per call view, the sum of |delta| the call adds (`position`: update view
/// number → call view, as [`call_views`] gives).
fn absums(views: usize, position: &[u16], merged: &Merged) -> Vec<f64> {
    let mut absum = vec![0.0f64; views];
    for ((view, _, _), (agg, _)) in &merged.updates {
        absum[position[*view as usize] as usize] += agg.value.abs();
    }
    absum
}

/// Encodes one instance. `fences` holds fences learnt from conflicts
/// (partition index → fence): updates at or below them are left out.
/// `None` when nothing is left to send.
fn encode(
    boards: &BoardSet,
    batch: &Updates,
    instance: u32,
    fences: &HashMap<u16, i64>,
    cache: &ExpiryCache,
    routes: Option<&BatchRoutes<'_>>,
) -> Option<Encoded> {
    let inst = &batch.instances[instance as usize];
    let started = Instant::now();
    let mut expiries = Vec::new();
    // An expiry is sent only when this consumer has not set it recently;
    // "0" tells the script to leave it alone.
    let mut expiry = |key: &str, at: i64| -> String {
        if at != 0 && cache.wanted(key, at, started) {
            expiries.push((key.to_string(), at));
            at.to_string()
        } else {
            "0".to_string()
        }
    };
    let board = &boards.boards[inst.board];
    let merged = merge(inst.board, board, inst, fences, routes);
    if merged.groups.is_empty() {
        return None;
    }
    let (call_views, position) = call_views(inst.views.len(), &merged);
    let prefix = &boards.key_prefix;
    let fence_key = keys::fence_key(prefix, &inst.tag);
    let fence_expire = fence_expire(board, inst);
    let mut args = Vec::new();
    push_header(&mut args, board, &expiry(&fence_key, fence_expire));
    let mut call_keys = vec![fence_key];
    push_groups(&mut args, &merged.groups, &batch.fields);
    let absum = absums(call_views.len(), &position, &merged);
    args.push(call_views.len().to_string().into());
    let mut cutoffs = Vec::new();
    for (i, &(c, twin)) in call_views.iter().enumerate() {
        let v = &inst.views[c];
        let real = keys::view_key(prefix, &inst.tag, &v.id);
        let archived = v.close_at.is_some();
        let key = match twin {
            true => keys::twin_view_key(prefix, &inst.tag, &v.id),
            false => real.clone(),
        };
        let (exp, window) = (expiry(&key, v.expire_at), v.window_ms.is_some());
        push_view_keys(&mut call_keys, board, key, window, archived && !twin);
        if archived && twin {
            // A twin closes with its view: bound to the view's own marker.
            call_keys.push(keys::closed_key(&real));
        }
        push_view_args(&mut args, &mut cutoffs, board, v, exp, absum[i]);
    }
    let updates = push_updates(
        &mut args,
        board,
        inst,
        &call_views,
        &position,
        &batch.members,
        merged.updates,
    );
    Some(Encoded {
        member: Member {
            instance,
            board: inst.board,
        },
        keys: call_keys,
        args,
        cutoffs,
        expiries,
        updates,
        extras: needs_extras(board),
    })
}

/// Whether the script must define what windows and composite rules need
/// for this board's instances (`extras` in state.lua; calls without them
/// skip about 7 µs of definitions each).
fn needs_extras(board: &Board) -> bool {
    board.composite.is_some() || board.has_windows()
}

/// Appends one view's arguments: its kind, expiry, and for a period the
/// |delta| sum and bound field, for a window the cutoff's place (filled in
/// per attempt).
fn push_view_args(
    args: &mut Vec<Vec<u8>>,
    cutoffs: &mut Vec<(usize, i64)>,
    board: &Board,
    v: &super::updates::ConcreteView,
    exp: String,
    absum: f64,
) {
    match v.window_ms {
        None => {
            // "a": a period that the archiver may have closed.
            args.push(if v.close_at.is_some() { "a" } else { "p" }.into());
            args.push(exp.into());
            args.push(num(absum).into());
            args.push(bound_field(board, &v.id).unwrap_or_default().into());
        }
        Some(length) => {
            args.push("w".into());
            args.push(exp.into());
            cutoffs.push((args.len(), length));
            args.push(Vec::new());
        }
    }
}

/// Appends the fenced partition ranges: their count, then each one's fence
/// field and first and last offset.
fn push_groups(args: &mut Vec<Vec<u8>>, groups: &BTreeMap<u16, (i64, i64)>, fields: &[String]) {
    args.push(groups.len().to_string().into());
    for (part, (lo, hi)) in groups {
        args.push(fields[*part as usize].clone().into());
        args.push(lo.to_string().into());
        args.push(hi.to_string().into());
    }
}

/// Appends the merged updates, one packed argument per view (the layout
/// is at the top of `apply.lua`); returns how many. Packed rather than one
/// argument per value: Redis makes a Lua string of every argument and the
/// script parsed each number back, most of its cost per update.
fn push_updates(
    args: &mut Vec<Vec<u8>>,
    board: &Board,
    inst: &Instance,
    call_views: &[(usize, bool)],
    position: &[u16],
    members: &[Arc<str>],
    merged: FastMap<(u16, u32, i64), Pending>,
) -> usize {
    // A plain sum (no tie-break, no window) never reads the event time.
    let with_ts = board.needs_time()
        || board.aggregate != Aggregate::Sum
        || inst.views.iter().any(|v| v.window_ms.is_some());
    let mut per_view: Vec<Vec<(u32, i64, Pending)>> = vec![Vec::new(); call_views.len()];
    for ((view, member, bucket), pending) in merged {
        per_view[position[view as usize] as usize].push((member, bucket, pending));
    }
    let mut count = 0;
    for (i, entries) in per_view.into_iter().enumerate() {
        count += entries.len();
        args.push(pack_view(
            board,
            with_ts,
            inst.views[call_views[i].0].window_ms.is_some(),
            members,
            &entries,
        ));
    }
    count
}

/// Appends a length-prefixed byte string (`I4 c0` in the script).
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Members and bucket ends are short (members at most a few hundred
    // bytes by the schemas), far below u32::MAX.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// One view's updates as the script's packed argument.
fn pack_view(
    board: &Board,
    with_ts: bool,
    window: bool,
    members: &[Arc<str>],
    entries: &[(u32, i64, Pending)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 32);
    // Windows list their distinct bucket ends once; updates refer to them
    // by 1-based index.
    let mut buckets: FastMap<i64, u32> = FastMap::default();
    if window {
        let mut ends: Vec<i64> = entries.iter().map(|(_, b, _)| *b).collect();
        ends.sort_unstable();
        ends.dedup();
        out.extend_from_slice(&(ends.len() as u32).to_le_bytes());
        for (i, end) in ends.iter().enumerate() {
            put_bytes(&mut out, end.to_string().as_bytes());
            buckets.insert(*end, i as u32 + 1);
        }
    }
    for (member, bucket, (agg, fields)) in entries {
        put_bytes(&mut out, members[*member as usize].as_bytes());
        if let (Some(c), Some(fields)) = (&board.composite, fields) {
            // Composite: per field a presence byte, then value and time.
            for f in fields.iter().take(c.layout.fields.len()) {
                match f {
                    Some(a) => {
                        out.push(1);
                        out.extend_from_slice(&a.value.to_le_bytes());
                        out.extend_from_slice(&(a.ts as f64).to_le_bytes());
                    }
                    None => out.push(0),
                }
            }
        } else {
            out.extend_from_slice(&agg.value.to_le_bytes());
            if with_ts {
                out.extend_from_slice(&(agg.ts as f64).to_le_bytes());
            }
        }
        if window {
            let index = buckets.get(bucket).copied().unwrap_or(0);
            out.extend_from_slice(&index.to_le_bytes());
        }
    }
    out
}

/// Builds the calls for the given instances of a batch, routing members
/// as moderation snapshot `snap` says; the calls carry its generation.
pub(crate) fn build(
    boards: &BoardSet,
    batch: &Updates,
    which: &[u32],
    fences: &HashMap<u32, HashMap<u16, i64>>,
    grouping: Grouping,
    cache: &ExpiryCache,
    snap: &Snapshot,
) -> Vec<Call> {
    let none = HashMap::new();
    let routes = snap.batch_routes(&batch.members);
    let encoded = which
        .iter()
        .filter_map(|&i| {
            let known = fences.get(&i).unwrap_or(&none);
            let tag = &batch.instances[i as usize].tag;
            encode(boards, batch, i, known, cache, routes.as_ref())
                .map(|e| (group_of(grouping, tag), e))
        })
        .collect();
    let mut calls = pack(encoded);
    for c in &mut calls {
        c.modgen = snap.generation;
    }
    calls
}

/// Calls that only trim the windows of the given instances.
pub(crate) fn trims(
    boards: &BoardSet,
    instances: &[(usize, String)],
    grouping: Grouping,
) -> Vec<Call> {
    let prefix = &boards.key_prefix;
    let encoded = instances
        .iter()
        .filter_map(|(board_index, tag)| {
            let board = &boards.boards[*board_index];
            let windows: Vec<_> = board
                .views
                .iter()
                .filter_map(|v| match v {
                    ViewSpec::Window(w) => Some(w),
                    ViewSpec::Period { .. } => None,
                })
                .collect();
            if windows.is_empty() {
                return None;
            }
            let mut call_keys = vec![keys::fence_key(prefix, tag)];
            let mut args = Vec::new();
            push_header(&mut args, board, "0");
            args.push("0".into());
            args.push(windows.len().to_string().into());
            let mut cutoffs = Vec::new();
            for w in &windows {
                push_view_keys(
                    &mut call_keys,
                    board,
                    keys::view_key(prefix, tag, &w.view()),
                    true,
                    false,
                );
                args.push("w".into());
                args.push("0".into());
                cutoffs.push((args.len(), w.length_ms));
                args.push(Vec::new());
            }
            // No updates for any view: an empty packed argument each.
            args.extend(windows.iter().map(|_| Vec::new()));
            let e = Encoded {
                member: Member {
                    instance: u32::MAX,
                    board: *board_index,
                },
                keys: call_keys,
                args,
                cutoffs,
                expiries: Vec::new(),
                // Trimming work is bounded by the script's eviction budget.
                updates: MAX_UPDATES_PER_CALL / 8,
                extras: true,
            };
            Some((group_of(grouping, tag), e))
        })
        .collect();
    pack(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board with one window view, for both tests below.
    const RECENT: &str = r#"
            [[board]]
            name = "recent"
            event = "gift"
            member = "receiver_id"
            score = "count"
            windows = ["1h/1m"]
"#;

    /// The packed layout of `apply.lua`'s header, built by hand: a window
    /// view's bucket ends (sorted, each once), then per update the member,
    /// value, time and 1-based bucket index.
    #[test]
    fn a_window_view_packs_its_bucket_ends_once_and_indexes_them() {
        let set = crate::config::test_boards(RECENT);
        let members: Vec<Arc<str>> = vec!["ab".into(), "c".into()];
        let entries = vec![
            (1, 120_000, (Agg::new(2.5, 7), None)),
            (0, 60_000, (Agg::new(-1.0, 9), None)),
        ];
        let got = pack_view(&set.boards[0], true, true, &members, &entries);
        let mut want: Vec<u8> = Vec::new();
        want.extend(2u32.to_le_bytes());
        for end in ["60000", "120000"] {
            want.extend((end.len() as u32).to_le_bytes());
            want.extend(end.as_bytes());
        }
        for (m, v, t, b) in [("c", 2.5f64, 7f64, 2u32), ("ab", -1.0, 9.0, 1)] {
            want.extend((m.len() as u32).to_le_bytes());
            want.extend(m.as_bytes());
            want.extend(v.to_le_bytes());
            want.extend(t.to_le_bytes());
            want.extend(b.to_le_bytes());
        }
        assert_eq!(got, want);
        // A plain-sum period view: member and value only, no bucket list.
        let plain = pack_view(&set.boards[0], false, false, &members, &entries[..1]);
        let mut want: Vec<u8> = 1u32.to_le_bytes().to_vec();
        want.extend(b"c");
        want.extend(2.5f64.to_le_bytes());
        assert_eq!(plain, want);
    }

    /// Only boards with a window view or a composite rule make the script
    /// define state.lua's `extras`, and a call says so in its instance
    /// count ("x<n>"), which apply.lua reads.
    #[test]
    fn only_window_and_composite_boards_mark_their_calls_for_the_extras() {
        let plain = r#"
            [[board]]
            name = "plain"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["day", "all"]
            tie_break = "earliest"
            "#;
        let both = r#"
            [[board]]
            name = "both"
            event = "score"
            member = "user_id"
            periods = ["all"]
            order_by = [
              { field = "best", score = "points", aggregate = "max" },
              { field = "games", score = "1", aggregate = "sum" },
            ]
            "#;
        let set = crate::config::test_boards(&[plain, RECENT, both].concat());
        let marks: Vec<bool> = set.boards.iter().map(needs_extras).collect();
        assert_eq!(marks, [false, true, true]);
        let encoded = |extras: bool| Encoded {
            member: Member {
                instance: 0,
                board: 0,
            },
            keys: vec!["k".into()],
            args: vec![b"a".to_vec()],
            cutoffs: Vec::new(),
            expiries: Vec::new(),
            updates: 1,
            extras,
        };
        // Two instances in one call, the second with or without them.
        let call = |extras: bool| pack(vec![(0, encoded(false)), (0, encoded(extras))]);
        let argv3 = |calls: Vec<Call>| -> Vec<String> {
            calls
                .iter()
                .map(|c| {
                    let cmd = c.command("sha", 5);
                    // EVALSHA sha numkeys KEYS... now modgen count ...
                    match cmd.args_iter().nth(3 + c.keys.len() + 2) {
                        Some(redis::Arg::Simple(a)) => String::from_utf8_lossy(a).into_owned(),
                        _ => String::new(),
                    }
                })
                .collect()
        };
        assert_eq!(argv3(call(false)), ["2"]);
        assert_eq!(
            argv3(call(true)),
            ["x2"],
            "one instance needing them marks the call"
        );
    }
}
