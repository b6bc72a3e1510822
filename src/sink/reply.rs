//! The apply script's replies (`lua/apply.lua` documents the layout): per
//! call either what each board instance wrote, or the fences that showed
//! part of the call applied already. A leaf: the calls' encoding and the
//! batch's settling both read it.

/// The cutoff a reply gives a period view the script found closed (its
/// `K:closed` marker set by the archiver): it took none of that view's
/// updates, and counted them all late. Open periods report -1.
pub const CLOSED_CUTOFF: i64 = -2;

/// Counts of one instance from a reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub(crate) applied: u64,
    pub(crate) evicted: u64,
    pub(crate) overflow: u64,
    /// Updates found late: window updates whose bucket had left the
    /// window, and every update of a closed archived period.
    pub(crate) late: u64,
    /// When `late` is not 0: the cutoff the script used per view (buckets
    /// ending at or before it are late; -1 for open periods,
    /// [`CLOSED_CUTOFF`] for closed ones), else empty.
    pub(crate) cutoffs: Vec<i64>,
}

/// A decoded reply of the apply script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Done {
        /// Some instance's eviction stopped at its budget; trim again.
        more: bool,
        /// Per member of the call, in order.
        counts: Vec<Counts>,
    },
    /// Groups reach their fence (applied already, in part or in full): the
    /// script wrote nothing. Each entry is (member index in the call,
    /// partition field, fence).
    Conflict(Vec<(usize, String, i64)>),
    /// An instance carries a moderation stamp newer than the generation the
    /// call was encoded with: the script wrote nothing, and the caller reads
    /// the moderation record again (at least this generation) and resends.
    Moderated(i64),
}

fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

impl Reply {
    pub(crate) fn parse(value: &redis::Value) -> Option<Reply> {
        let redis::Value::Array(items) = value else {
            return None;
        };
        let int = |i: usize| match items.get(i) {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        };
        match int(0)? {
            1 => {
                let mut counts = Vec::new();
                let mut i = 2;
                while i + 4 < items.len() {
                    let Some(redis::Value::Array(cuts)) = items.get(i + 4) else {
                        return None;
                    };
                    let cutoffs = cuts
                        .iter()
                        .map(|c| match c {
                            redis::Value::Int(n) => Some(*n),
                            _ => None,
                        })
                        .collect::<Option<Vec<i64>>>()?;
                    counts.push(Counts {
                        applied: int(i)? as u64,
                        evicted: int(i + 1)? as u64,
                        overflow: int(i + 2)? as u64,
                        late: int(i + 3)? as u64,
                        cutoffs,
                    });
                    i += 5;
                }
                if i != items.len() {
                    return None;
                }
                Some(Reply::Done {
                    more: int(1)? != 0,
                    counts,
                })
            }
            0 => {
                let mut conflicts = Vec::new();
                let mut i = 1;
                while i < items.len() {
                    let member = usize::try_from(int(i)?).ok()?.checked_sub(1)?;
                    conflicts.push((member, text(items.get(i + 1)?)?, int(i + 2)?));
                    i += 3;
                }
                Some(Reply::Conflict(conflicts))
            }
            2 => Some(Reply::Moderated(int(1)?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn a_done_reply_carries_the_cutoffs_of_instances_with_late_updates() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(0),
            Value::Int(3),
            Value::Int(1),
            Value::Int(0),
            Value::Int(0),
            Value::Array(vec![]),
            Value::Int(1),
            Value::Int(0),
            Value::Int(0),
            Value::Int(2),
            Value::Array(vec![Value::Int(-1), Value::Int(1_700_000_000_000)]),
        ]);
        let Some(Reply::Done { more, counts }) = Reply::parse(&reply) else {
            panic!("not a done reply");
        };
        assert!(!more);
        assert_eq!(counts.len(), 2);
        assert_eq!((counts[0].applied, counts[0].evicted), (3, 1));
        assert!(counts[0].cutoffs.is_empty());
        assert_eq!(counts[1].late, 2);
        assert_eq!(counts[1].cutoffs, vec![-1, 1_700_000_000_000]);
    }

    #[test]
    fn a_done_reply_without_the_cutoffs_is_refused() {
        // {1, more, applied, evicted, overflow, late}: the old layout.
        let mut items = vec![Value::Int(1)];
        items.extend((0..5).map(|_| Value::Int(0)));
        assert_eq!(Reply::parse(&Value::Array(items)), None);
    }
}
