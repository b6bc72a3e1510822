//! Checks (docs/checks.md): `[[check]]` entries that an event must pass
//! before it may change a board. A rule check is an expression that must
//! hold, decided here when the event is taken; a rate check counts a
//! member's events that passed within a sliding length of event time, and
//! is decided in Redis when the batch is flushed (`crate::sink::rates`), so
//! that every instance of the fleet decides alike. An event that fails a
//! check goes to the quarantine topic instead of the boards.
//!
//! The table as written is in [`spec`], the `max_rate` syntax in [`rate`],
//! a member's rate state and the decisions made from it in [`state`].

use std::borrow::Cow;
use std::sync::Arc;

use crate::board::duration::Span;
use crate::event::EventType;
use crate::expr::{Expect, Program, Record};

mod rate;
pub(crate) mod spec;
pub(crate) mod state;

pub(crate) use rate::MaxRate;
pub(crate) use spec::CheckSpec;
pub use state::Decision;

/// A check that cannot be compiled, located like a board's mistakes.
#[derive(Debug, thiserror::Error)]
#[error("{location}: {message}")]
pub struct CheckError {
    /// ``check `name` (#n), field `f` ``.
    pub(crate) location: String,
    /// What is wrong there.
    pub(crate) message: String,
}

/// A compiled rule check.
#[derive(Debug)]
pub(crate) struct RuleCheck {
    pub(crate) name: Arc<str>,
    pub(crate) rule: Program,
}

/// A compiled rate check.
#[derive(Debug, Clone)]
pub(crate) struct RateCheck {
    pub(crate) name: Arc<str>,
    pub(crate) rate: MaxRate,
}

/// The rate checks of one event type. They share their `member`
/// expression, so one member's state holds them all and one call decides
/// them together: an event passes only if it passes every one, and only
/// then counts for any of them.
#[derive(Debug)]
pub(crate) struct RateGroup {
    pub(crate) member: Program,
    pub(crate) checks: Vec<RateCheck>,
    /// The checks' limits, in the same order.
    pub(crate) limits: Vec<MaxRate>,
}

impl RateGroup {
    /// The longest length of the group: how long passed events are kept.
    pub(crate) fn longest_ms(&self) -> i64 {
        self.checks
            .iter()
            .map(|c| c.rate.length_ms)
            .max()
            .unwrap_or(0)
    }
}

/// What the checks decided when an event was taken.
#[derive(Debug)]
pub(crate) enum Screened<'e> {
    /// Passed every check (or there are none for its type).
    Pass,
    /// Passed the rule checks; its rate checks are decided in Redis for
    /// this member.
    Rate { member: Cow<'e, str> },
    /// Failed a check: quarantined.
    Fail { check: Arc<str>, detail: String },
}

/// Every compiled check, by event type.
#[derive(Debug, Default)]
pub struct CheckSet {
    rules: [Vec<RuleCheck>; 3],
    rates: [Option<RateGroup>; 3],
    /// Every check's name, in the configuration's order.
    names: Vec<Arc<str>>,
    /// What each check requires, in words, in the configuration's order
    /// (for `rankflow check`).
    described: Vec<String>,
}

fn location(number: usize, name: &str, field: &str) -> String {
    format!("check `{name}` (#{number}), field `{field}`")
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 64
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

impl CheckSet {
    /// Compiles the `[[check]]` tables; every mistake names the check and
    /// field.
    pub(crate) fn compile(specs: &[CheckSpec]) -> Result<CheckSet, CheckError> {
        let mut set = CheckSet::default();
        for (i, spec) in specs.iter().enumerate() {
            set.add(i + 1, spec)?;
        }
        Ok(set)
    }

    fn add(&mut self, number: usize, spec: &CheckSpec) -> Result<(), CheckError> {
        let at = |field: &str, message: String| CheckError {
            location: location(number, &spec.name, field),
            message,
        };
        if !valid_name(&spec.name) {
            return Err(at("name", "must match ^[a-z][a-z0-9_]{0,63}$".into()));
        }
        if self.names.iter().any(|n| **n == *spec.name) {
            return Err(at("name", "another check already has this name".into()));
        }
        let event = EventType::parse(&spec.event).ok_or_else(|| {
            at(
                "event",
                format!("unknown event type {:?} (gift, score or play)", spec.event),
            )
        })?;
        let compile = |field: &str, src: &str, expect| {
            Program::compile(src, expect).map_err(|e| {
                at(
                    field,
                    format!("{} at column {} of {src:?}", e.message, e.position),
                )
            })
        };
        let name: Arc<str> = Arc::from(spec.name.as_str());
        match (&spec.rule, &spec.member, &spec.max_rate) {
            (Some(rule), None, None) => {
                let rule = compile("rule", rule, Expect::Bool)?;
                self.add_rule(event, name.clone(), rule);
            }
            (None, Some(member), Some(max_rate)) => {
                let rate = MaxRate::parse(max_rate).map_err(|m| at("max_rate", m))?;
                let member = compile("member", member, Expect::String)?;
                self.add_rate(event, name.clone(), member, rate)
                    .map_err(|m| at("member", m))?;
            }
            (Some(_), _, _) => {
                return Err(at(
                    "rule",
                    "a check has either a `rule`, or a `member` and a `max_rate`, not both".into(),
                ));
            }
            (None, None, _) => {
                return Err(at(
                    "rule",
                    "missing: give a `rule`, or a `member` and a `max_rate`".into(),
                ));
            }
            (None, Some(_), None) => {
                return Err(at(
                    "max_rate",
                    "missing: a rate check needs `max_rate`".into(),
                ));
            }
        }
        self.names.push(name);
        Ok(())
    }

    fn add_rule(&mut self, event: EventType, name: Arc<str>, rule: Program) {
        self.described.push(format!(
            "{name}: {} events must satisfy `{}`",
            event.name(),
            rule.source()
        ));
        self.rules[event.index()].push(RuleCheck { name, rule });
    }

    /// Adds a rate check to its event type's group; the message says why
    /// its member cannot join the group.
    fn add_rate(
        &mut self,
        event: EventType,
        name: Arc<str>,
        member: Program,
        rate: MaxRate,
    ) -> Result<(), String> {
        self.described.push(format!(
            "{name}: at most {} {} events of one `{}` per {} of event time",
            rate.count,
            event.name(),
            member.source(),
            Span::Fixed { ms: rate.length_ms }
        ));
        let check = RateCheck { name, rate };
        match &mut self.rates[event.index()] {
            None => {
                self.rates[event.index()] = Some(RateGroup {
                    member,
                    checks: vec![check],
                    limits: vec![rate],
                });
            }
            Some(group) if group.member.source() == member.source() => {
                group.checks.push(check);
                group.limits.push(rate);
            }
            Some(group) => {
                return Err(format!(
                    "the rate checks of one event type must count the same member: {:?} is counted by check `{}` already",
                    group.member.source(),
                    group.checks[0].name
                ));
            }
        }
        Ok(())
    }

    /// Whether no check is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every check's name, in the configuration's order.
    pub(crate) fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// One line per check saying what it requires, in the configuration's
    /// order.
    pub(crate) fn described(&self) -> &[String] {
        &self.described
    }

    /// The rule checks of `kind`.
    pub(crate) fn rules(&self, kind: EventType) -> &[RuleCheck] {
        &self.rules[kind.index()]
    }

    /// The rate checks of `kind`, if any.
    pub(crate) fn rates(&self, kind: EventType) -> Option<&RateGroup> {
        self.rates[kind.index()].as_ref()
    }

    /// Runs the rule checks of an event of type `kind` (in the
    /// configuration's order; the first that fails decides), then finds the
    /// member its rate checks count.
    pub(crate) fn screen<'e>(&self, kind: EventType, fields: &'e dyn Record) -> Screened<'e> {
        for check in self.rules(kind) {
            match check.rule.eval_bool(fields) {
                Ok(true) => {}
                Ok(false) => {
                    return Screened::Fail {
                        check: check.name.clone(),
                        detail: format!("`{}` does not hold", check.rule.source()),
                    };
                }
                Err(e) => {
                    return Screened::Fail {
                        check: check.name.clone(),
                        detail: format!("`{}` cannot be evaluated: {e}", check.rule.source()),
                    };
                }
            }
        }
        let Some(group) = self.rates(kind) else {
            return Screened::Pass;
        };
        match group.member.eval_string(fields) {
            Ok(member) => Screened::Rate { member },
            Err(e) => Screened::Fail {
                check: group.checks[0].name.clone(),
                detail: format!(
                    "the member `{}` cannot be evaluated: {e}",
                    group.member.source()
                ),
            },
        }
    }
}
