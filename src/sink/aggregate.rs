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
pub(crate) struct Agg {
    pub(crate) value: f64,
    pub(crate) ts: i64,
}

impl Agg {
    pub fn new(value: f64, ts: i64) -> Agg {
        Agg { value, ts }
    }

    /// Folds `other` into `self` under `rule`.
    pub(crate) fn combine(&mut self, rule: Aggregate, other: Agg) {
        match rule {
            Aggregate::Sum => exact_sum(self, other),
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

/// A composite member's fields (docs/score-encoding.md), each a value and the time it
/// was reached, combined field by field with the field's own rule. The
/// tuple's tie time is the latest of its fields' times: when the member
/// reached its current tuple. A field without a value is `None`.
pub(crate) type FieldAggs = [Option<Agg>; MAX_FIELDS];

/// One event's field values at time `ts`.
pub(crate) fn field_aggs(values: &Values, ts: i64) -> FieldAggs {
    values.map(|v| v.map(|v| Agg::new(v as f64, ts)))
}

/// Folds `other` into `acc` field by field under `layout`'s rules.
pub(crate) fn combine_fields(layout: &Layout, acc: &mut FieldAggs, other: &FieldAggs) {
    for (i, f) in layout.fields.iter().enumerate() {
        match (&mut acc[i], other[i]) {
            (Some(a), Some(b)) if f.aggregate == Aggregate::Sum => exact_sum(a, b),
            (Some(a), Some(b)) => a.combine(f.aggregate, b),
            (slot @ None, Some(b)) => *slot = Some(b),
            (_, None) => {}
        }
    }
}

/// A sum of two pre-aggregated values that never rounds past the exact
/// range: integers are added as integers (a double would round a total just
/// past 2^53 back onto 2^53 and let it pass as exact), and a total out of
/// ±2^53 becomes an infinity, which the script refuses and counts as
/// overflow. An infinity stays one (a later negative delta must not bring an
/// overflowed total back, nor two opposite ones make a NaN).
fn exact_sum(a: &mut Agg, b: Agg) {
    a.ts = a.ts.max(b.ts);
    if !a.value.is_finite() || !b.value.is_finite() {
        if a.value.is_finite() {
            a.value = b.value;
        }
        return;
    }
    let exact = |v: f64| v.fract() == 0.0 && v.abs() <= MAX_VALUE as f64;
    let over = if exact(a.value) && exact(b.value) {
        // Both within ±2^53: the i64 sum cannot overflow and is exact.
        let sum = a.value as i64 + b.value as i64;
        a.value = sum as f64;
        sum.abs() > MAX_VALUE
    } else {
        a.value += b.value;
        a.value.abs() > MAX_VALUE as f64
    };
    if over {
        a.value = f64::INFINITY.copysign(a.value);
    }
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

    proptest! {
        // Against an i128 reference: a batch-combined sum is the exact total
        // while every partial total stays within ±2^53, and an overflow
        // (an infinity the script counts) as soon as one leaves it.
        #[test]
        fn batch_sums_are_exact_or_overflow_never_rounded(
            xs in prop::collection::vec(prop_oneof![
                -1000i64..1000,
                (MAX_VALUE - 3)..=MAX_VALUE,
                (-MAX_VALUE)..=(3 - MAX_VALUE),
            ], 1..12),
        ) {
            let mut total: i128 = 0;
            let mut overflowed = false;
            for x in &xs {
                total += i128::from(*x);
                overflowed |= total.abs() > i128::from(MAX_VALUE);
            }
            let got = fold(Aggregate::Sum, &xs.iter().map(|x| Agg::new(*x as f64, 0)).collect::<Vec<_>>());
            if overflowed {
                prop_assert!(got.value.is_infinite(), "{xs:?} gave {}", got.value);
            } else {
                prop_assert_eq!(got.value as i128, total);
                prop_assert_eq!(got.value, total as f64);
            }
        }
    }

    #[test]
    fn a_sum_just_past_two_to_the_53_is_not_rounded_onto_it() {
        let limit = MAX_VALUE as f64;
        let got = fold(Aggregate::Sum, &[Agg::new(limit, 1), Agg::new(1.0, 2)]);
        assert_eq!(got.value, f64::INFINITY, "2^53 + 1 must not become 2^53");
        let back = fold(
            Aggregate::Sum,
            &[got, Agg::new(-5.0, 3), Agg::new(f64::NEG_INFINITY, 4)],
        );
        assert_eq!(
            back.value,
            f64::INFINITY,
            "an overflowed total stays one, never NaN"
        );
        let halves = fold(Aggregate::Sum, &[Agg::new(0.5, 1), Agg::new(0.25, 2)]);
        assert_eq!(halves, Agg::new(0.75, 2));
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
