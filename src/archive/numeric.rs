//! Scores as PostgreSQL `numeric`, exactly. A board's score is a double in
//! Redis; the archive stores the decimal Redis shows for it (the shortest
//! that reads back as the same double), so `numeric` holds the true value
//! and `score::float8` gives the double back bit for bit.
//!
//! The infinities are stored too: a composite board's member without a
//! first field has the score -inf (desc) or +inf (asc) in Redis, which the
//! archive keeps as `numeric` `-Infinity` / `Infinity` (PostgreSQL 14 or
//! later), reading back as the same double. NaN is refused.
//!
//! Written by hand rather than through a decimal crate: those cap the
//! number of digits (28 for `rust_decimal`), and any finite double must
//! archive, however small or large. The encoding is PostgreSQL's binary
//! `numeric` (base-10000 digit groups), checked against PostgreSQL itself in
//! the archive tests.

use std::error::Error;

use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

const NEGATIVE: u16 = 0x4000;
/// The sign words of `Infinity` and `-Infinity` (PostgreSQL's numeric.h).
const POSITIVE_INFINITY: u16 = 0xD000;
const NEGATIVE_INFINITY: u16 = 0xF000;

/// A double written as an exact `numeric` (NaN is refused).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Numeric(pub f64);

/// The parts of PostgreSQL's binary `numeric`.
#[derive(Debug, PartialEq, Eq)]
struct Parts {
    /// Base-10000 digits, most significant first, without leading or
    /// trailing zero groups.
    groups: Vec<i16>,
    /// Power of 10000 of the first group.
    weight: i16,
    negative: bool,
    /// Decimal digits after the point.
    dscale: u16,
}

#[derive(Debug, thiserror::Error)]
#[error("score {0} is not a number")]
pub(crate) struct NotFinite(f64);

fn parts(value: f64) -> Result<Parts, NotFinite> {
    if !value.is_finite() {
        return Err(NotFinite(value));
    }
    if value == 0.0 {
        return Ok(Parts {
            groups: Vec::new(),
            weight: 0,
            negative: false,
            dscale: 0,
        });
    }
    // Shortest round-trip form `d.ddde±x`: value = digits × 10^exp.
    let text = format!("{:e}", value.abs());
    let (mantissa, exp) = text.split_once('e').ok_or(NotFinite(value))?;
    let exp: i32 = exp.parse().map_err(|_| NotFinite(value))?;
    let mut digits: Vec<u8> = mantissa
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    let mut low = exp - (digits.len() as i32 - 1);
    let dscale = (-low).max(0) as u16;
    // Align the lowest digit to a group boundary, then pad the top.
    let r = low.rem_euclid(4);
    digits.splice(digits.len().., std::iter::repeat_n(0, r as usize));
    low -= r;
    let pad = (4 - digits.len() % 4) % 4;
    digits.splice(0..0, std::iter::repeat_n(0, pad));
    let mut groups: Vec<i16> = digits
        .chunks(4)
        .map(|c| c.iter().fold(0i16, |acc, d| acc * 10 + *d as i16))
        .collect();
    let mut weight = low / 4 + groups.len() as i32 - 1;
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    Ok(Parts {
        groups,
        weight: weight as i16,
        negative: value < 0.0,
        dscale,
    })
}

impl ToSql for Numeric {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        if self.0.is_infinite() {
            // No digits, weight 0, the infinity's sign word, scale 0.
            out.put_i16(0);
            out.put_i16(0);
            out.put_u16(if self.0 > 0.0 {
                POSITIVE_INFINITY
            } else {
                NEGATIVE_INFINITY
            });
            out.put_u16(0);
            return Ok(IsNull::No);
        }
        let p = parts(self.0)?;
        out.put_i16(p.groups.len() as i16);
        out.put_i16(p.weight);
        out.put_u16(if p.negative { NEGATIVE } else { 0 });
        out.put_u16(p.dscale);
        for g in p.groups {
            out.put_i16(g);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(groups: &[i16], weight: i16, negative: bool, dscale: u16) -> Parts {
        Parts {
            groups: groups.to_vec(),
            weight,
            negative,
            dscale,
        }
    }

    /// Hand-worked encodings (PostgreSQL's numeric.c layout).
    #[test]
    fn encodes_like_postgres() {
        assert_eq!(parts(0.0).unwrap(), p(&[], 0, false, 0));
        assert_eq!(parts(1.0).unwrap(), p(&[1], 0, false, 0));
        assert_eq!(parts(10000.0).unwrap(), p(&[1], 1, false, 0));
        assert_eq!(parts(12345.0).unwrap(), p(&[1, 2345], 1, false, 0));
        assert_eq!(parts(-42.5).unwrap(), p(&[42, 5000], 0, true, 1));
        assert_eq!(parts(0.0001).unwrap(), p(&[1], -1, false, 4));
        assert_eq!(
            parts(0.30000000000000004).unwrap(),
            p(&[3000, 0, 0, 0, 4000], -1, false, 17)
        );
        assert_eq!(
            parts(9007199254740992.0).unwrap(),
            p(&[9007, 1992, 5474, 992], 3, false, 0)
        );
        assert_eq!(parts(1e-300).unwrap().dscale, 300);
        assert!(parts(f64::NAN).is_err());
        assert!(parts(f64::INFINITY).is_err());
    }

    /// The infinities are PostgreSQL's special values: no digits, the
    /// sign word 0xD000 (+) or 0xF000 (−); NaN is refused.
    #[test]
    fn infinities_have_their_sign_words() {
        let bytes = |v: f64| {
            let mut out = BytesMut::new();
            Numeric(v)
                .to_sql(&Type::NUMERIC, &mut out)
                .map(|_| out.to_vec())
        };
        assert_eq!(bytes(f64::INFINITY).unwrap(), [0, 0, 0, 0, 0xD0, 0, 0, 0]);
        assert_eq!(
            bytes(f64::NEG_INFINITY).unwrap(),
            [0, 0, 0, 0, 0xF0, 0, 0, 0]
        );
        assert!(bytes(f64::NAN).is_err());
        assert_eq!(bytes(-1.0).unwrap(), [0, 1, 0, 0, 0x40, 0, 0, 0, 0, 1]);
    }
}
