//! The aggregate rules (`sum`, `max`, `min`, `last`) on a (value, time)
//! pair, exactly as `apply.lua` applies them in Redis. The consumer uses them
//! to pre-aggregate a batch per (view, member); the tests use them as the
//! reference model. Pre-aggregation is sound because every rule is
//! associative and commutative, so applying a batch's combined update equals
//! applying its events one by one in any order.
//!
//! The time component is the moment the member reached its score (the
//! tie-break time): for `sum` the latest contributing event, for `max`/`min`
//! the earliest event that attained the best value, for `last` the event
//! whose value is kept.

use crate::board::Aggregate;
use crate::board::composite::{Layout, MAX_FIELDS, MAX_VALUE, Values};

/// A member's aggregated value and the time it was reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agg {
    pub value: f64,
    pub ts: i64,
}

impl Agg {
    pub fn new(value: f64, ts: i64) -> Agg {
        Agg { value, ts }
    }

    /// Folds `other` into `self` under `rule`.
    pub fn combine(&mut self, rule: Aggregate, other: Agg) {
        match rule {
            Aggregate::Sum => {
                self.value += other.value;
                self.ts = self.ts.max(other.ts);
            }
            Aggregate::Max => {
                if other.value > self.value || (other.value == self.value && other.ts < self.ts) {
                    *self = other;
                }
            }
            Aggregate::Min => {
                if other.value < self.value || (other.value == self.value && other.ts < self.ts) {
                    *self = other;
                }
            }
            Aggregate::Last => {
                // Equal times keep the greater value, so the result does not
                // depend on the order replays arrive in.
                if other.ts > self.ts || (other.ts == self.ts && other.value > self.value) {
                    *self = other;
                }
            }
        }
    }
}

/// A composite member's fields (SPEC §8.2), each a value and the time it
/// was reached, combined field by field with the field's own rule. The
/// tuple's tie time is the latest of its fields' times: when the member
/// reached its current tuple. A field without a value is `None`.
pub type FieldAggs = [Option<Agg>; MAX_FIELDS];

/// One event's field values at time `ts`.
pub fn field_aggs(values: &Values, ts: i64) -> FieldAggs {
    values.map(|v| v.map(|v| Agg::new(v as f64, ts)))
}

/// Folds `other` into `acc` field by field under `layout`'s rules.
pub fn combine_fields(layout: &Layout, acc: &mut FieldAggs, other: &FieldAggs) {
    for (i, f) in layout.fields.iter().enumerate() {
        match (&mut acc[i], other[i]) {
            (Some(a), Some(b)) if f.aggregate == Aggregate::Sum => exact_sum(a, b),
            (Some(a), Some(b)) => a.combine(f.aggregate, b),
            (slot @ None, Some(b)) => *slot = Some(b),
            (_, None) => {}
        }
    }
}

/// A composite sum, added in integers: a double would round a total just
/// past 2^53 back onto 2^53 and let it pass as exact. A total out of range
/// becomes an infinity, which the script refuses (and counts) as overflow.
fn exact_sum(a: &mut Agg, b: Agg) {
    a.ts = a.ts.max(b.ts);
    if !a.value.is_finite() || !b.value.is_finite() {
        a.value += b.value;
        return;
    }
    // Both are integers within ±2^53 (checked by the rules), so the i64
    // sum cannot overflow.
    let sum = a.value as i64 + b.value as i64;
    a.value = if sum.abs() > MAX_VALUE {
        f64::INFINITY.copysign(sum as f64)
    } else {
        sum as f64
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RULES: [Aggregate; 4] = [
        Aggregate::Sum,
        Aggregate::Max,
        Aggregate::Min,
        Aggregate::Last,
    ];

    fn fold(rule: Aggregate, xs: &[Agg]) -> Agg {
        let mut acc = xs[0];
        for x in &xs[1..] {
            acc.combine(rule, *x);
        }
        acc
    }

    proptest! {
        // Integer values keep sums exact, so order cannot matter at all.
        #[test]
        fn order_and_grouping_do_not_matter(
            xs in prop::collection::vec((-1000i64..1000, 0i64..50), 1..20),
            split in 0usize..20,
            seed in any::<u64>(),
        ) {
            let xs: Vec<Agg> = xs.into_iter().map(|(v, t)| Agg::new(v as f64, t)).collect();
            let mut shuffled = xs.clone();
            let n = shuffled.len();
            let mut s = seed;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            for rule in RULES {
                let direct = fold(rule, &xs);
                prop_assert_eq!(fold(rule, &shuffled), direct);
                let k = split.min(n - 1).max(1).min(n);
                if k < n {
                    let mut left = fold(rule, &xs[..k]);
                    left.combine(rule, fold(rule, &xs[k..]));
                    prop_assert_eq!(left, direct);
                }
            }
        }
    }

    #[test]
    fn tie_times_follow_the_rules() {
        let a = Agg::new(5.0, 10);
        let b = Agg::new(5.0, 3);
        assert_eq!(
            fold(Aggregate::Max, &[a, b]).ts,
            3,
            "max: earliest time at the best value"
        );
        assert_eq!(fold(Aggregate::Sum, &[a, b]), Agg::new(10.0, 10));
        assert_eq!(
            fold(Aggregate::Last, &[Agg::new(1.0, 9), Agg::new(7.0, 2)]),
            Agg::new(1.0, 9)
        );
        assert_eq!(
            fold(Aggregate::Min, &[Agg::new(1.0, 9), Agg::new(7.0, 2)]),
            Agg::new(1.0, 9)
        );
    }
}
