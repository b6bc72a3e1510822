//! Encoding one board instance's share of a batch as a call of
//! `lua/apply.lua`: its keys (fence, then every view with its helper keys)
//! and arguments (clock, rules, partition groups with offset ranges, views,
//! then the updates pre-aggregated per (partition, view, member, bucket)).
//!
//! The layout is documented at the top of `apply.lua`; the two must change
//! together.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::config::Aggregate;

use super::aggregate::Agg;
use super::batch::{Instance, PartState};

/// The apply script.
pub const APPLY_LUA: &str = include_str!("lua/apply.lua");

/// One EVALSHA of the apply script.
#[derive(Debug, Clone)]
pub struct Call {
    /// Index of the instance in its batch (`u32::MAX` for trim-only calls).
    pub instance: u32,
    /// Hash tag content; every key below shares it.
    pub tag: String,
    pub board: usize,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

/// A decoded reply of the apply script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Done {
        applied: u64,
        evicted: u64,
        overflow: u64,
        late: u64,
        /// Eviction stopped at its budget; another trim call is needed.
        more: bool,
        /// Partition groups skipped as already applied.
        duplicates: u64,
    },
    /// The group of `field` overlaps the fence partly: the script wrote
    /// nothing; rebuild without offsets ≤ `fence` and call again.
    Conflict { field: String, fence: i64 },
}

impl Reply {
    pub fn parse(value: &redis::Value) -> Option<Reply> {
        let redis::Value::Array(items) = value else {
            return None;
        };
        let int = |i: usize| match items.get(i) {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        };
        match int(0)? {
            1 => Some(Reply::Done {
                applied: int(1)? as u64,
                evicted: int(2)? as u64,
                overflow: int(3)? as u64,
                late: int(4)? as u64,
                more: int(5)? != 0,
                duplicates: int(6)? as u64,
            }),
            0 => {
                let field = match items.get(1)? {
                    redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
                    redis::Value::SimpleString(s) => s.clone(),
                    _ => return None,
                };
                Some(Reply::Conflict {
                    field,
                    fence: int(2)?,
                })
            }
            _ => None,
        }
    }
}

fn agg_code(a: Aggregate) -> &'static str {
    match a {
        Aggregate::Sum => "sum",
        Aggregate::Max => "max",
        Aggregate::Min => "min",
        Aggregate::Last => "last",
    }
}

/// Appends a view's keys in the order `apply.lua` binds them.
fn push_view_keys(keys_out: &mut Vec<String>, board: &Board, key: String, window: bool) {
    let helper = |suffix: &str| keys::helper(&key, suffix);
    let mut extra = Vec::new();
    if board.needs_time() {
        extra.push(helper("t"));
    }
    if window {
        extra.push(helper("log"));
        extra.push(helper("n"));
        if matches!(board.aggregate, Aggregate::Max | Aggregate::Min) {
            extra.push(helper("ord"));
        }
        extra.push(helper("cut"));
    }
    keys_out.push(key);
    keys_out.extend(extra);
}

fn header(board: &Board, now: i64, fence_expire: i64) -> Vec<String> {
    vec![
        now.to_string(),
        agg_code(board.aggregate).to_string(),
        board.tie_key.code().to_string(),
        fence_expire.to_string(),
    ]
}

/// Shortest text that parses back to the same double (Lua's `tonumber`
/// reads it exactly).
fn num(out: &mut String, v: f64) {
    let _ = write!(out, "{v}");
}

/// Builds the call for one instance. `fences` holds fences learnt from
/// conflicts (partition index → fence): updates at or below them are left
/// out. Returns `None` when nothing is left to send.
pub fn build(
    boards: &BoardSet,
    inst: &Instance,
    instance: u32,
    parts: &[PartState],
    fences: &HashMap<u16, i64>,
    now: i64,
) -> Option<Call> {
    let board = &boards.boards[inst.board];
    // part → (lo, hi, (view, member, bucket) → agg)
    type Groups<'a> = BTreeMap<u16, (i64, i64, HashMap<(u16, &'a Arc<str>, i64), Agg>)>;
    let mut groups: Groups<'_> = BTreeMap::new();
    for u in &inst.updates {
        if fences.get(&u.part).is_some_and(|&f| u.offset <= f) {
            continue;
        }
        let g = groups
            .entry(u.part)
            .or_insert_with(|| (u.offset, u.offset, HashMap::new()));
        g.0 = g.0.min(u.offset);
        g.1 = g.1.max(u.offset);
        g.2.entry((u.view, &u.member, u.bucket_end))
            .and_modify(|a| a.combine(board.aggregate, u.agg))
            .or_insert(u.agg);
    }
    if groups.is_empty() {
        return None;
    }
    let prefix = &boards.key_prefix;
    let mut call_keys = vec![keys::fence_key(prefix, &inst.tag)];
    let fence_expire = if board.has_unbounded_view() {
        -1
    } else {
        inst.views.iter().map(|v| v.expire_at).max().unwrap_or(0)
    };
    let mut args = header(board, now, fence_expire);
    args.push(groups.len().to_string());
    for (part, (lo, hi, _)) in &groups {
        args.push(parts[*part as usize].field.clone());
        args.push(lo.to_string());
        args.push(hi.to_string());
    }
    args.push(inst.views.len().to_string());
    for v in &inst.views {
        let key = keys::view_key(prefix, &inst.tag, &v.id);
        push_view_keys(&mut call_keys, board, key, v.window_ms.is_some());
        match v.window_ms {
            None => {
                args.push("p".into());
                args.push(v.expire_at.to_string());
            }
            Some(length) => {
                args.push("w".into());
                args.push(v.expire_at.to_string());
                args.push(now.saturating_sub(length).to_string());
            }
        }
    }
    let mut text = String::new();
    for (_, (_, _, updates)) in groups {
        let mut per_view: Vec<Vec<(&Arc<str>, i64, Agg)>> = vec![Vec::new(); inst.views.len()];
        for ((view, member, bucket), agg) in updates {
            per_view[view as usize].push((member, bucket, agg));
        }
        for (view, entries) in per_view.into_iter().enumerate() {
            let window = inst.views[view].window_ms.is_some();
            args.push(entries.len().to_string());
            for (member, bucket, agg) in entries {
                args.push(member.to_string());
                text.clear();
                num(&mut text, agg.value);
                args.push(text.clone());
                args.push(agg.ts.to_string());
                if window {
                    args.push(bucket.to_string());
                }
            }
        }
    }
    Some(Call {
        instance,
        tag: inst.tag.clone(),
        board: inst.board,
        keys: call_keys,
        args,
    })
}

/// A call that only trims the windows of one instance to `now`.
pub fn trim(boards: &BoardSet, board_index: usize, tag: &str, now: i64) -> Option<Call> {
    let board = &boards.boards[board_index];
    let prefix = &boards.key_prefix;
    let mut call_keys = vec![keys::fence_key(prefix, tag)];
    let mut args = header(board, now, -1);
    args.push("0".into());
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
    args.push(windows.len().to_string());
    for w in windows {
        push_view_keys(
            &mut call_keys,
            board,
            keys::view_key(prefix, tag, &w.view()),
            true,
        );
        args.push("w".into());
        args.push("0".into());
        args.push(w.cutoff(now).to_string());
    }
    Some(Call {
        instance: u32::MAX,
        tag: tag.to_string(),
        board: board_index,
        keys: call_keys,
        args,
    })
}

impl Call {
    /// The EVALSHA command for this call.
    pub fn command(&self, sha: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}
