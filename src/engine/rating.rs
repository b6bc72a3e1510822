//! What a consumer's flushes share for rate checks (docs/checks.md): the
//! order in which they decide (a batch's events are decided after the
//! batch before it had its own decided, not after it was applied, so that
//! deciding overlaps the previous batch's writes), what they know applied
//! to the boards, and the rate states they last read or wrote.
//!
//! Applied marks only ever claim less than the truth: they come from this
//! consumer's own applied batches, in the current Redis state epoch. A
//! mark that lags keeps a little more in the members' states and answers a
//! redelivery from them instead of skipping it; one ahead of the truth
//! could skip an event no batch applied, which is why a lost Redis state
//! forgets them.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::sink::rates::Known;

/// The shared part; one per consumer.
#[derive(Debug)]
pub(crate) struct Rating {
    turns: Mutex<Turns>,
    /// The turn now due, for the flushes waiting for theirs.
    turn: watch::Sender<u64>,
    applied: Mutex<Applied>,
    known: Mutex<Known>,
}

impl Default for Rating {
    fn default() -> Self {
        Rating {
            turns: Mutex::default(),
            turn: watch::channel(0).0,
            applied: Mutex::default(),
            known: Mutex::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Turns {
    issued: u64,
    due: u64,
    /// Turns finished out of order, waiting for those before them.
    done: BTreeSet<u64>,
}

#[derive(Debug, Default)]
struct Applied {
    epoch: u64,
    /// Partition field → highest offset applied by this consumer.
    marks: HashMap<String, i64>,
}

/// A batch's place in the order of decisions; finished when dropped, so a
/// flush that gives up never holds the next ones back.
#[derive(Debug)]
pub(crate) struct Ticket {
    n: u64,
    rating: Arc<Rating>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Rating {
    /// The next place in the order (taken in the order batches close).
    pub(crate) fn ticket(self: &Arc<Self>) -> Ticket {
        let mut t = lock(&self.turns);
        t.issued += 1;
        Ticket {
            n: t.issued - 1,
            rating: self.clone(),
        }
    }

    /// The highest offset known applied of each partition field (-1 when
    /// none is known), for Redis state epoch `epoch`.
    pub(crate) fn marks(&self, epoch: u64, fields: &[String]) -> Vec<i64> {
        let a = lock(&self.applied);
        fields
            .iter()
            .map(|f| match a.epoch == epoch {
                true => a.marks.get(f).copied().unwrap_or(-1),
                false => -1,
            })
            .collect()
    }

    /// Records what an applied batch applied: per partition field, its
    /// last offset.
    pub(crate) fn applied<'a>(&self, epoch: u64, last: impl Iterator<Item = (&'a str, i64)>) {
        let mut a = lock(&self.applied);
        if a.epoch != epoch {
            a.marks.clear();
            a.epoch = epoch;
        }
        for (field, offset) in last {
            let mark = a.marks.entry(field.to_string()).or_insert(-1);
            *mark = (*mark).max(offset);
        }
    }

    /// The rate states remembered (taken: put back with [`Rating::put_known`]).
    pub(crate) fn take_known(&self) -> Known {
        std::mem::take(&mut *lock(&self.known))
    }

    pub(crate) fn put_known(&self, known: Known) {
        *lock(&self.known) = known;
    }

    fn finish(&self, n: u64) {
        let mut t = lock(&self.turns);
        t.done.insert(n);
        loop {
            let due = t.due;
            if !t.done.remove(&due) {
                break;
            }
            t.due += 1;
        }
        self.turn.send_replace(t.due);
    }
}

impl Ticket {
    /// Waits until every batch before this one had its decisions made (or
    /// gave up).
    pub(crate) async fn turn(&self) {
        let mut rx = self.rating.turn.subscribe();
        let n = self.n;
        let _ = rx.wait_for(|due| *due >= n).await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.rating.finish(self.n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_come_in_the_order_tickets_were_taken_whatever_order_they_finish_in() {
        let rating = Arc::new(Rating::default());
        let (a, b, c) = (rating.ticket(), rating.ticket(), rating.ticket());
        let due = || *rating.turn.borrow();
        assert_eq!(due(), 0);
        drop(c);
        assert_eq!(due(), 0, "the third finishing first lets no one on");
        drop(a);
        assert_eq!(due(), 1);
        b.turn().await;
        drop(b);
        assert_eq!(due(), 3, "the second done, the third was already");
    }

    #[test]
    fn marks_only_claim_what_was_applied_in_the_current_epoch() {
        let rating = Rating::default();
        let fields = vec!["t/0".to_string(), "t/1".to_string()];
        assert_eq!(rating.marks(1, &fields), vec![-1, -1]);
        rating.applied(1, [("t/0", 9), ("t/0", 4)].into_iter());
        assert_eq!(rating.marks(1, &fields), vec![9, -1]);
        assert_eq!(
            rating.marks(2, &fields),
            vec![-1, -1],
            "Redis lost its state"
        );
        rating.applied(2, [("t/1", 3)].into_iter());
        assert_eq!(rating.marks(2, &fields), vec![-1, 3]);
    }
}
