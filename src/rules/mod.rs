//! Board rules applied to one event: which boards it matches (`event` and
//! `filter`), who is ranked (`member`), by how much (`score`) and in which
//! board instance (`scope`). The expressions were compiled once at start-up
//! ([`crate::expr`]); here they are only evaluated.
//!
//! A composite board (docs/score-encoding.md) evaluates each field's filter and
//! expression: a field whose filter fails carries no value from the event,
//! and a board none of whose fields matched is filtered for that event.
//! Field values must be integers in [−2^53, 2^53]: exact means exact, so a
//! fraction or a larger value is an expression error, never rounded.
//!
//! An event is all-or-nothing: if any matching board's expression fails, the
//! event changes no board and goes to the dead-letter topic, so that fixing
//! and replaying it cannot double-count the boards that did succeed.

use std::borrow::Cow;

use crate::board::BoardSet;
use crate::board::composite::{self, MAX_FIELDS, Values};
use crate::board::model::Board;
use crate::board::score::is_exact;
use crate::event::Event;
use crate::expr::EvalError;
use crate::telemetry::DlqReason;

/// Longest member or scope value, in bytes. Ids are at most 128 bytes; this
/// leaves room for composed members while keeping keys and entries small.
pub(crate) const MAX_MEMBER_BYTES: usize = 512;

/// One board's update from one event, before views are resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Update<'e> {
    /// Index into [`BoardSet::boards`].
    pub(crate) board: usize,
    pub(crate) scope: Option<Cow<'e, str>>,
    pub(crate) member: Cow<'e, str>,
    /// The score; for a composite board its first field (0 when that
    /// field has no value from this event).
    pub(crate) value: f64,
    /// A composite board's field values from this event.
    pub(crate) fields: Option<Values>,
}

/// Why an event's rules could not be evaluated (dead-letter reason `expression`).
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// A board's `filter`, `member`, `score` or `scope` failed on the event
    /// (a missing field, a type error, a division by zero...).
    #[error("board `{board}`, field `{field}`: {source}")]
    Eval {
        /// The board's name.
        board: String,
        /// The rule that failed: `filter`, `member`, `score` or `scope`.
        field: &'static str,
        /// How it failed.
        source: EvalError,
    },
    /// The `filter` or `score` of a composite board's `order_by` field
    /// failed on the event.
    #[error("board `{board}`, order_by field `{field}`: {source}")]
    FieldEval {
        /// The board's name.
        board: String,
        /// The `order_by` field's `field` name.
        field: String,
        /// How it failed.
        source: EvalError,
    },
    /// An `order_by` field's `score` gave a value a composite field cannot
    /// hold exactly: not an integer in [-2^53, 2^53] (never rounded).
    #[error("board `{board}`, order_by field `{field}`: {problem}")]
    BadField {
        /// The board's name.
        board: String,
        /// The `order_by` field's `field` name.
        field: String,
        /// The value and the range it is outside of.
        problem: String,
    },
    /// A rule gave a value the board cannot store: an empty or too long
    /// `member` or `scope` (over 512 bytes), or a `score` outside ±2^53.
    #[error("board `{board}`, field `{field}`: {problem}")]
    BadKey {
        /// The board's name.
        board: String,
        /// The rule whose value is refused: `member`, `scope` or `score`.
        field: &'static str,
        /// What is wrong with the value.
        problem: String,
    },
}

impl RuleError {
    pub(crate) fn reason(&self) -> DlqReason {
        DlqReason::Expression
    }
}

/// Evaluates every board that consumes `event`'s type; appends the updates
/// of the boards whose filter passed. `Ok` with nothing appended means the
/// event was filtered out everywhere.
pub fn evaluate<'e>(
    boards: &BoardSet,
    event: &'e Event,
    out: &mut Vec<Update<'e>>,
) -> Result<(), RuleError> {
    let start = out.len();
    let result = evaluate_inner(boards, event, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn evaluate_inner<'e>(
    boards: &BoardSet,
    event: &'e Event,
    out: &mut Vec<Update<'e>>,
) -> Result<(), RuleError> {
    let fields = &event.fields;
    for &i in boards.for_event(event.kind) {
        let board = &boards.boards[i];
        // A shadow holds the events from its `backfill_from` on: older
        // ones replayed from the topics are not its to count.
        if let Some(from) = board.shadow.as_ref().and_then(|s| s.backfill_from)
            && event.ts < from
        {
            continue;
        }
        let fail = |field: &'static str| {
            move |source: EvalError| RuleError::Eval {
                board: board.name.clone(),
                field,
                source,
            }
        };
        if let Some(filter) = &board.filter
            && !filter.eval_bool(fields).map_err(fail("filter"))?
        {
            continue;
        }
        let composite = match &board.composite {
            Some(_) => match field_values(board, event)? {
                Some(values) => Some(values),
                None => continue,
            },
            None => None,
        };
        let member = board.member.eval_string(fields).map_err(fail("member"))?;
        check_key(&board.name, "member", &member)?;
        let value = match &composite {
            Some(values) => values[0].unwrap_or(0) as f64,
            None => board.score.eval_number(fields).map_err(fail("score"))?,
        };
        if !is_exact(value) {
            return Err(RuleError::BadKey {
                board: board.name.clone(),
                field: "score",
                problem: format!("{value} is outside the exact range ±2^53"),
            });
        }
        let scope = match &board.scope {
            Some(p) => {
                let s = p.eval_string(fields).map_err(fail("scope"))?;
                check_key(&board.name, "scope", &s)?;
                Some(s)
            }
            None => None,
        };
        out.push(Update {
            board: i,
            scope,
            member,
            value,
            fields: composite,
        });
    }
    Ok(())
}

/// A composite board's values from `event`: per field its expression where
/// its filter passes; `None` when no field's filter passed.
fn field_values(board: &Board, event: &Event) -> Result<Option<Values>, RuleError> {
    let Some(c) = &board.composite else {
        return Ok(None);
    };
    let mut values: Values = [None; MAX_FIELDS];
    let mut any = false;
    for (i, (f, spec)) in c.fields.iter().zip(&c.layout.fields).enumerate() {
        let fail = |source: EvalError| RuleError::FieldEval {
            board: board.name.clone(),
            field: spec.name.clone(),
            source,
        };
        if let Some(filter) = &f.filter
            && !filter.eval_bool(&event.fields).map_err(fail)?
        {
            continue;
        }
        let v = f.score.eval_number(&event.fields).map_err(fail)?;
        if !composite::in_range(v) {
            return Err(RuleError::BadField {
                board: board.name.clone(),
                field: spec.name.clone(),
                problem: format!(
                    "{v} is not an integer in [-2^53, 2^53]; composite fields are exact, never rounded"
                ),
            });
        }
        values[i] = Some(v as i64);
        any = true;
    }
    Ok(any.then_some(values))
}

fn check_key(board: &str, field: &'static str, value: &str) -> Result<(), RuleError> {
    let problem = if value.is_empty() {
        "is empty".to_string()
    } else if value.len() > MAX_MEMBER_BYTES {
        format!("is {} bytes long (limit {MAX_MEMBER_BYTES})", value.len())
    } else {
        return Ok(());
    };
    Err(RuleError::BadKey {
        board: board.to_string(),
        field,
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Decoder;

    fn boards() -> BoardSet {
        let text = r#"
[[board]]
            name = "flowers"
            event = "gift"
            filter = 'gift_id == "flower"'
            member = "receiver_id"
            score = "count"
            periods = ["week"]
            [[board]]
            name = "fans"
            event = "gift"
            member = "sender_id"
            score = "count * value"
            scope = "receiver_id"
            periods = ["day"]
            [[board]]
            name = "ratio"
            event = "gift"
            member = "sender_id"
            score = "count / (count - count)"
            filter = "has(extra.divide)"
            periods = ["day"]
        "#;
        crate::config::test_boards(text)
    }

    fn event(json: serde_json::Value) -> Event {
        Decoder::new(65536)
            .unwrap()
            .decode(json.to_string().as_bytes())
            .unwrap()
    }

    fn gift(gift_id: &str, extra: serde_json::Value) -> Event {
        event(serde_json::json!({
            "type": "gift", "event_id": "e", "ts": 1_763_700_000_000i64, "sender_id": "s",
            "receiver_id": "r{1}", "gift_id": gift_id, "count": 3, "value": 2.5, "extra": extra
        }))
    }

    #[test]
    fn filter_member_score_and_scope() {
        let set = boards();
        let e = gift("flower", serde_json::json!({}));
        let mut out = Vec::new();
        evaluate(&set, &e, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].member, "r{1}");
        assert_eq!(out[0].value, 3.0);
        assert_eq!(out[1].scope.as_deref(), Some("r{1}"));
        assert_eq!(out[1].value, 7.5);
        let e = gift("rose", serde_json::json!({}));
        out.clear();
        evaluate(&set, &e, &mut out).unwrap();
        assert_eq!(out.len(), 1, "the flower filter drops a rose");
    }

    const STAGES: &str = r#"
        [[board]]
        name = "stage_clears"
        event = "score"
        member = "user_id"
        periods = ["day"]
        order_by = [
          { field = "levels", score = "cleared ? 1 : 0", filter = "has(cleared)", aggregate = "sum" },
          { field = "revives", score = "revives", filter = "has(revives)", aggregate = "sum", order = "asc" },
          { field = "first_clear", score = "ts", filter = "has(cleared) && cleared", aggregate = "min" },
        ]
    "#;

    fn score(extra: serde_json::Value) -> Event {
        let mut e = serde_json::json!({
            "type": "score", "event_id": "e", "ts": 1_763_700_000_000i64, "user_id": "u1",
            "game_id": "g", "points": 1
        });
        if let (Some(m), serde_json::Value::Object(x)) = (e.as_object_mut(), extra) {
            m.extend(x);
        }
        event(e)
    }

    #[test]
    fn composite_fields_take_values_where_their_filters_pass() {
        let set = crate::config::test_boards(STAGES);
        let fields = |extra: serde_json::Value| {
            let e = score(extra);
            let mut out = Vec::new();
            evaluate(&set, &e, &mut out)
                .map(|()| out.iter().map(|u| (u.value, u.fields)).collect::<Vec<_>>())
        };
        assert_eq!(
            fields(serde_json::json!({"cleared": true, "revives": 2})).unwrap(),
            [(1.0, Some([Some(1), Some(2), Some(1_763_700_000_000), None]))]
        );
        // No first field: the score placeholder is 0.
        assert_eq!(
            fields(serde_json::json!({"revives": 3})).unwrap(),
            [(0.0, Some([None, Some(3), None, None]))]
        );
        assert!(
            fields(serde_json::json!({})).unwrap().is_empty(),
            "no field matched: filtered"
        );
        let halves = crate::config::test_boards(
            &STAGES.replace("\"revives\", filter", "\"revives * 0.5\", filter"),
        );
        for (set, bad) in [(&set, 100_000_000_000_000_000i64), (&halves, 3)] {
            let e = score(serde_json::json!({ "revives": bad }));
            let err = evaluate(set, &e, &mut Vec::new()).unwrap_err();
            assert_eq!(err.reason(), DlqReason::Expression);
            assert!(
                err.to_string().contains("order_by field `revives`"),
                "{err}"
            );
            // (The expression layer refuses integers past 2^53 itself.)
            assert!(
                err.to_string().contains("never rounded") || err.to_string().contains("2^53"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_failing_expression_rejects_the_whole_event() {
        let set = boards();
        let e = gift("flower", serde_json::json!({"divide": true}));
        let mut out = Vec::new();
        let err = evaluate(&set, &e, &mut out).unwrap_err();
        assert_eq!(err.reason(), DlqReason::Expression);
        assert!(err.to_string().contains("board `ratio`"), "{err}");
        assert!(out.is_empty(), "no partial updates survive");
    }
}
