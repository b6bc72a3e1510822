//! Building a large union without blocking Redis (docs/http-api.md). A union
//! computed by one script call (`ZUNIONSTORE`, or the tie-break loop of
//! `union.lua`) holds Redis for its whole length: about 0.6 s for 7 day
//! boards of 100,000 members, 4 s for a tie-break board, during which every
//! write and read of every board waits (and past `busy-reply-threshold`
//! gets `BUSY`). So a union whose boards hold more than a few tens of
//! thousands of entries is built here instead, in slices:
//!
//! 1. each source is read with `ZSCAN … COUNT 5000` (a member returned
//!    twice, which `ZSCAN` allows while the board changes, counts once: the
//!    later time wins for tie-break boards, the later value otherwise);
//! 2. the members are combined here by the rules of `union.lua` (sum, or
//!    max/min with the winning value's time, earliest among equals);
//! 3. the result is written to a temporary key beside the result key (same
//!    hash tag; it expires by itself if this process dies) in `ZADD`/`HSET`
//!    slices of 5,000;
//! 4. one short script renames it over the result key and sets the
//!    freshness marker, so readers see the old result or the new one whole.
//!
//! No single command then holds Redis for more than a few milliseconds.
//! The result is a union of the boards as they stood during the build,
//! like any read of boards that keep changing.

use std::collections::HashMap;

use super::error::ReadError;
use super::plan::{UnionPlan, nonce};
use super::script::ReadScript;
use crate::sink::store::{Store, StoreError};

/// Entries per `ZSCAN` and per `ZADD`/`HSET` of the build.
const SLICE: usize = 5_000;

/// How long a temporary key may outlive a build that died, ms.
const TEMP_TTL_MS: i64 = 60_000;

/// Largest tie key (12 hex digits).
const MAXT: i64 = (1 << 48) - 1;

/// Most entries (all sources together) a union computes in one script
/// call: about 40 ms of Redis for a plain board (`ZUNIONSTORE`, ~0.8 µs an
/// entry), and for a tie-break board, whose script decodes every entry
/// (~5 µs), a fifth of that.
pub(crate) const INLINE_MAX_PLAIN: u64 = 50_000;
pub(crate) const INLINE_MAX_TIE: u64 = 10_000;

/// Renames a built union over the result key, in one step.
const FINISH_LUA: &str = r#"
-- KEYS: result, its time hash, freshness marker, built set, built times
-- ARGV: the result's time to live (union_cache) ms, the marker's ms, tie code
redis.call("UNLINK", KEYS[1], KEYS[2])
local ttl, marker = tonumber(ARGV[1]), tonumber(ARGV[2])
if redis.call("EXISTS", KEYS[4]) == 0 then
  redis.call("UNLINK", KEYS[5])
  return 0
end
redis.call("RENAME", KEYS[4], KEYS[1])
redis.call("PEXPIRE", KEYS[1], ttl)
if ARGV[3] ~= "n" then
  redis.call("RENAME", KEYS[5], KEYS[2])
  redis.call("PEXPIRE", KEYS[2], ttl)
end
redis.call("SET", KEYS[3], "1", "PX", marker)
return redis.call("ZCARD", KEYS[1])
"#;

static FINISH: ReadScript = ReadScript::new("union-finish", FINISH_LUA);

/// Whether a union of `entries` (all sources together) is built here
/// rather than in one script call.
pub(super) fn too_big_for_one_call(
    plan: &UnionPlan,
    entries: u64,
    inline_max: Option<u64>,
) -> bool {
    let max = inline_max.unwrap_or(if plan.tie == "n" {
        INLINE_MAX_PLAIN
    } else {
        INLINE_MAX_TIE
    });
    entries > max
}

/// Whether the result is fresh, and how many entries the sources hold.
pub(super) async fn survey(
    store: &Store,
    plan: &UnionPlan,
    sources: &[String],
) -> Result<(bool, u64), ReadError> {
    let mut cmds = vec![redis::cmd("EXISTS").arg(&plan.fresh).clone()];
    cmds.extend(sources.iter().map(|s| redis::cmd("ZCARD").arg(s).clone()));
    let replies = store.pipeline(&cmds, store.epoch()).await?;
    let numbers: Vec<u64> = replies
        .into_iter()
        .map(redis::from_redis_value::<u64>)
        .collect::<Result<_, _>>()
        .map_err(|e| StoreError::Protocol(format!("union survey reply: {e}")))?;
    let fresh = numbers.first().is_some_and(|n| *n > 0);
    Ok((fresh, numbers.iter().skip(1).sum()))
}

/// One member of a union being built: its value and tie time.
type Acc = HashMap<String, (f64, i64)>;

/// Builds the union of `sources` into the plan's result key in slices;
/// returns the number of members.
pub(super) async fn build(
    store: &Store,
    plan: &UnionPlan,
    sources: &[String],
    (ttl_ms, marker_ms): (i64, i64),
) -> Result<u64, ReadError> {
    let mut union = Acc::new();
    for source in sources {
        let board = scan(store, source, plan.tie).await?;
        fold(&mut union, board, plan.aggregate);
    }
    let temp = format!("{}:build:{}", plan.result, nonce());
    let temp_times = format!("{temp}:t");
    write(store, &union, plan.tie, (&temp, &temp_times)).await?;
    let keys = [
        plan.result.as_str(),
        &plan.times,
        &plan.fresh,
        &temp,
        &temp_times,
    ];
    let args = [
        ttl_ms.to_string(),
        marker_ms.to_string(),
        plan.tie.to_string(),
    ];
    let made = FINISH.eval(store, &keys, &args).await?;
    let made: u64 = redis::from_redis_value(made)
        .map_err(|e| StoreError::Protocol(format!("union finish reply: {e}")))?;
    Ok(made)
}

/// One board as `ZSCAN` returns it: member → (value, tie time), members
/// decoded from their tie key (`tie` "a" or "d"), each once.
async fn scan(store: &Store, key: &str, tie: &str) -> Result<Acc, ReadError> {
    let mut out = Acc::new();
    let mut cursor = 0u64;
    loop {
        let mut cmd = redis::cmd("ZSCAN");
        cmd.arg(key).arg(cursor).arg("COUNT").arg(SLICE);
        let (next, flat): (u64, Vec<String>) = store.query(&cmd).await?;
        for pair in flat.chunks_exact(2) {
            let value: f64 = pair[1]
                .parse()
                .map_err(|_| StoreError::Protocol(format!("score {:?} in {key}", pair[1])))?;
            let (member, time) = decode(&pair[0], tie)?;
            match out.get(member) {
                // Seen twice while the board changed: the later time wins.
                Some((_, seen)) if tie != "n" && *seen > time => {}
                _ => {
                    out.insert(member.to_string(), (value, time));
                }
            }
        }
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

/// A stored member's name and tie time (0 on boards without tie keys).
fn decode<'m>(stored: &'m str, tie: &str) -> Result<(&'m str, i64), StoreError> {
    if tie == "n" {
        return Ok((stored, 0));
    }
    let bad = || StoreError::Protocol(format!("member {stored:?} has no tie key"));
    let (code, member) = (
        stored.get(..12).ok_or_else(bad)?,
        stored.get(12..).ok_or_else(bad)?,
    );
    let key = i64::from_str_radix(code, 16).map_err(|_| bad())?;
    Ok((member, if tie == "d" { MAXT - key } else { key }))
}

/// Adds one board to the union: sums (time: the latest), or the larger
/// (smaller) value with its time, the earliest among equal values.
fn fold(union: &mut Acc, board: Acc, aggregate: &str) {
    for (member, (x, t)) in board {
        match union.get_mut(&member) {
            None => {
                union.insert(member, (x, t));
            }
            Some(cur) if aggregate == "sum" => *cur = (cur.0 + x, cur.1.max(t)),
            Some(cur) if (aggregate == "max" && x > cur.0) || (aggregate == "min" && x < cur.0) => {
                *cur = (x, t);
            }
            Some(cur) if x == cur.0 && t < cur.1 => cur.1 = t,
            Some(_) => {}
        }
    }
}

/// Writes the union to the temporary keys in slices, each pipeline of
/// slices one round trip; the keys expire on their own unless renamed.
async fn write(
    store: &Store,
    union: &Acc,
    tie: &str,
    (temp, temp_times): (&str, &str),
) -> Result<(), ReadError> {
    let rows: Vec<(&String, &(f64, i64))> = union.iter().collect();
    for group in rows.chunks(SLICE * 8) {
        let mut cmds = Vec::new();
        for slice in group.chunks(SLICE) {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(temp);
            let mut hset = redis::cmd("HSET");
            hset.arg(temp_times);
            for (member, (value, time)) in slice {
                zadd.arg(*value);
                match tie {
                    "n" => zadd.arg(member.as_str()),
                    _ => {
                        let key = if tie == "d" { MAXT - time } else { *time };
                        hset.arg(member.as_str()).arg(*time);
                        zadd.arg(format!("{key:012x}{member}"))
                    }
                };
            }
            cmds.push(zadd);
            cmds.push(redis::cmd("PEXPIRE").arg(temp).arg(TEMP_TTL_MS).clone());
            if tie != "n" {
                cmds.push(hset);
                cmds.push(
                    redis::cmd("PEXPIRE")
                        .arg(temp_times)
                        .arg(TEMP_TTL_MS)
                        .clone(),
                );
            }
        }
        let replies = store.pipeline(&cmds, store.epoch()).await?;
        if let Some(err) = replies.iter().find_map(crate::sink::store::server_error) {
            return Err(err.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(rows: &[(&str, f64, i64)]) -> Acc {
        rows.iter()
            .map(|(m, x, t)| (m.to_string(), (*x, *t)))
            .collect()
    }

    #[test]
    fn members_fold_by_the_rules_of_the_union_script() {
        let a = acc(&[("x", 5.0, 10), ("y", 7.0, 20)]);
        let b = acc(&[("x", 5.0, 4), ("z", 1.0, 1), ("y", 2.0, 30)]);
        let mut sum = Acc::new();
        fold(&mut sum, a.clone(), "sum");
        fold(&mut sum, b.clone(), "sum");
        assert_eq!(sum, acc(&[("x", 10.0, 10), ("y", 9.0, 30), ("z", 1.0, 1)]));
        let mut max = Acc::new();
        fold(&mut max, a.clone(), "max");
        fold(&mut max, b.clone(), "max");
        // x: equal maxima, the earlier time; y: 7 beats 2 and keeps its time.
        assert_eq!(max, acc(&[("x", 5.0, 4), ("y", 7.0, 20), ("z", 1.0, 1)]));
        let mut min = Acc::new();
        fold(&mut min, a, "min");
        fold(&mut min, b, "min");
        assert_eq!(min, acc(&[("x", 5.0, 4), ("y", 2.0, 30), ("z", 1.0, 1)]));
    }

    #[test]
    fn tie_keys_decode_both_ways_and_bad_members_are_errors() {
        assert_eq!(decode("00000000000am", "a").unwrap(), ("m", 10));
        assert_eq!(
            decode(&format!("{:012x}m:1", MAXT - 10), "d").unwrap(),
            ("m:1", 10)
        );
        assert_eq!(decode("plain", "n").unwrap(), ("plain", 0));
        assert!(decode("short", "a").is_err());
        assert!(decode("zzzzzzzzzzzzm", "a").is_err());
    }
}
