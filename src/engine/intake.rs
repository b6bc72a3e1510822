//! Taking one message into the batch being built: decode it, check its
//! time against the clock, run its rule checks (docs/checks.md), run the
//! board rules, add its updates and count it; a message that fails a step
//! becomes a dead letter, one that fails a check a quarantined letter, and
//! one with rate checks waits in the batch for their decision.

use std::sync::Arc;

use rdkafka::Message;

use crate::board::BoardSet;
use crate::board::resolve::Resolver;
use crate::checks::{CheckSet, Screened};
use crate::deadletter::{DeadLetter, Verdict};
use crate::event::{Decoder, EventType};
use crate::moderation::{Cell, Snapshot};
use crate::rules;
use crate::sink::rates::Candidate;
use crate::telemetry::{DlqReason, Outcome};

use super::batch::{Batch, Taken};
use super::rated;

pub(crate) struct Intake {
    boards: Arc<BoardSet>,
    checks: Arc<CheckSet>,
    decoder: Arc<Decoder>,
    resolver: Resolver,
    /// Topic names seen, shared by every message of the topic.
    topics: Vec<Arc<str>>,
    /// Longest payload copied into a dead letter.
    max_event_bytes: usize,
    /// Dead letters go to a topic, so they keep their payloads.
    keep_payloads: bool,
    /// The rules' output buffer, kept empty between messages so that an
    /// event's updates need no allocation of their own.
    updates: Vec<rules::Update<'static>>,
    /// Who is hidden or erased: the sink's view, and the snapshot of it
    /// this intake last took (taken again when its generation moves: one
    /// atomic load per message).
    moderation: Arc<Cell>,
    snapshot: Arc<Snapshot>,
}

/// An empty vector of updates borrowing for another lifetime, in the
/// allocation of `v` (the standard library collects a `filter_map` of a
/// vector's own `into_iter` in place when the element layouts match, as
/// they do here: only the lifetime differs).
// `filter` cannot change the element type (its lifetime), `filter_map` can.
#[allow(clippy::unnecessary_filter_map)]
fn recycle<'b>(mut v: Vec<rules::Update<'_>>) -> Vec<rules::Update<'b>> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// Why a message is rejected, and what is known of it.
struct Rejection {
    part: u16,
    kind: Option<EventType>,
    reason: DlqReason,
    detail: String,
}

impl Intake {
    pub fn new(
        boards: Arc<BoardSet>,
        checks: Arc<CheckSet>,
        decoder: Arc<Decoder>,
        max_event_bytes: usize,
        keep_payloads: bool,
        moderation: Arc<Cell>,
    ) -> Intake {
        Intake {
            resolver: Resolver::new(&boards),
            boards,
            checks,
            decoder,
            topics: Vec::new(),
            max_event_bytes,
            keep_payloads,
            updates: Vec::new(),
            snapshot: moderation.current(),
            moderation,
        }
    }

    fn intern(&mut self, topic: &str) -> Arc<str> {
        if let Some(t) = self.topics.iter().find(|t| t.as_ref() == topic) {
            return t.clone();
        }
        let t: Arc<str> = Arc::from(topic);
        self.topics.push(t.clone());
        t
    }

    /// Decodes one message read at clock `now` and adds it to `batch`.
    pub(crate) fn take<M: Message>(&mut self, batch: &mut Batch, msg: &M, now: i64) {
        let topic = self.intern(msg.topic());
        let part = batch.take_message(&topic, msg.partition(), msg.offset());
        let reject = |kind, reason, detail| Rejection {
            part,
            kind,
            reason,
            detail,
        };
        let event = match self.decoder.decode(msg.payload().unwrap_or(&[])) {
            Ok(e) => e,
            Err(e) => {
                return self.reject(batch, &topic, msg, reject(None, e.reason(), e.to_string()));
            }
        };
        let skew = self.boards.future_skew_ms;
        if event.ts > now.saturating_add(skew) {
            let detail = format!(
                "event time {} is {} ms ahead of the clock (max_future_skew is {skew} ms)",
                event.ts,
                event.ts - now,
            );
            let why = reject(Some(event.kind), DlqReason::FutureTs, detail);
            return self.reject(batch, &topic, msg, why);
        }
        if self.snapshot.generation != self.moderation.generation() {
            self.snapshot = self.moderation.current();
        }
        let rated = match self.screen(event.kind, &event.fields) {
            Screened::Pass => None,
            Screened::Rate { member } => Some(member),
            Screened::Fail { check, detail } => {
                return quarantine(batch, &topic, msg, (part, event.kind), check, detail);
            }
        };
        let mut updates = recycle(std::mem::take(&mut self.updates));
        if let Err(e) = rules::evaluate(&self.boards, &event, &mut updates) {
            self.updates = recycle(updates);
            let why = reject(Some(event.kind), e.reason(), e.to_string());
            return self.reject(batch, &topic, msg, why);
        }
        let taken = Taken {
            part,
            offset: msg.offset(),
            ts: event.ts,
            kind: event.kind,
        };
        let outcome = batch.add_moderated_event(
            &self.boards,
            &mut self.resolver,
            taken,
            &mut updates,
            now,
            &self.snapshot,
        );
        self.updates = recycle(updates);
        if let Some(member) = rated {
            let candidate = Candidate {
                part,
                offset: msg.offset(),
                ts: event.ts,
                kind: event.kind,
                member: batch.rated.member(&member),
            };
            let msg = rated::Message {
                key: msg.key(),
                payload: msg.payload().unwrap_or(&[]),
            };
            batch.rated.push(candidate, msg, outcome);
        }
    }

    /// Runs the checks of an event of type `kind`. The rate checks of an
    /// erased member are not kept: its state would keep its id in Redis,
    /// and its own boards drop its events anyway.
    fn screen<'e>(&self, kind: EventType, fields: &'e dyn crate::expr::Record) -> Screened<'e> {
        if self.checks.is_empty() {
            return Screened::Pass;
        }
        match self.checks.screen(kind, fields) {
            Screened::Rate { member } if self.snapshot.is_erased(&member) => Screened::Pass,
            screened => screened,
        }
    }

    fn reject<M: Message>(&self, batch: &mut Batch, topic: &Arc<str>, msg: &M, why: Rejection) {
        batch.count(why.part, why.kind, Outcome::Invalid);
        tracing::debug!(topic = %topic, partition = msg.partition(), offset = msg.offset(), reason = %why.reason, detail = %why.detail, "Invalid event skipped.");
        // Kept for the dead-letter topic, up to the size limit (the source
        // coordinates find the rest).
        let payload = if self.keep_payloads {
            let p = msg.payload().unwrap_or(&[]);
            p[..p.len().min(self.max_event_bytes)].to_vec()
        } else {
            Vec::new()
        };
        let letter = letter(topic, msg, payload);
        batch
            .record
            .dead_letters
            .push(letter(Verdict::Invalid(why.reason), why.detail));
    }
}

/// Counts a message of partition `part` that failed `check` and keeps it
/// for the quarantine topic.
fn quarantine<M: Message>(
    batch: &mut Batch,
    topic: &Arc<str>,
    msg: &M,
    (part, kind): (u16, EventType),
    check: Arc<str>,
    detail: String,
) {
    batch.count(part, Some(kind), Outcome::Quarantined);
    tracing::debug!(topic = %topic, partition = msg.partition(), offset = msg.offset(), check = %check, detail = %detail, "Event quarantined.");
    let letter = letter(topic, msg, msg.payload().unwrap_or(&[]).to_vec());
    batch
        .record
        .dead_letters
        .push(letter(Verdict::Quarantined(check), detail));
}

/// The letter of a message that is not applied, given why.
fn letter<'m, M: Message>(
    topic: &'m Arc<str>,
    msg: &'m M,
    payload: Vec<u8>,
) -> impl FnOnce(Verdict, String) -> DeadLetter + 'm {
    move |why, detail| DeadLetter {
        topic: topic.clone(),
        partition: msg.partition(),
        offset: msg.offset(),
        key: msg.key().map(<[u8]>::to_vec),
        payload,
        why,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    #[test]
    fn recycling_the_update_buffer_keeps_its_allocation() {
        let mut v: Vec<rules::Update<'static>> = Vec::with_capacity(8);
        let ptr = v.as_ptr() as usize;
        let text = String::from("m");
        let mut borrowed = recycle(std::mem::take(&mut v));
        borrowed.push(rules::Update {
            board: 0,
            scope: None,
            member: Cow::Borrowed(&text),
            value: 1.0,
            fields: None,
        });
        let back: Vec<rules::Update<'static>> = recycle(borrowed);
        assert!(back.is_empty());
        assert_eq!(back.capacity(), 8);
        assert_eq!(back.as_ptr() as usize, ptr, "the same allocation");
    }
}
