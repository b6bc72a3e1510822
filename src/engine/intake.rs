//! Taking one message into the batch being built: decode it, check its
//! time against the clock, run its rule checks (docs/checks.md), run the
//! board rules, add its updates and count it; a message that fails a step
//! becomes a dead letter, one that fails a check a quarantined letter, and
//! one with rate checks waits in the batch for their decision. In the live
//! consumers, the rules of the shadow boards they apply beside their own
//! in the message's partition run too (`cover.rs`): on their own, as the
//! shadow's backfill would run them, so a shadow's failing rule only
//! leaves the shadow out.

use std::collections::HashMap;
use std::sync::Arc;

use rdkafka::Message;

use crate::board::resolve::Resolver;
use crate::board::{BoardSet, keys};
use crate::checks::{CheckSet, Screened};
use crate::deadletter::{DeadLetter, Verdict};
use crate::event::{Decoder, EventType};
use crate::moderation::{Cell, Snapshot};
use crate::rules;
use crate::sink::rates::Candidate;
use crate::source::TopicPartition;
use crate::telemetry::{DlqReason, Outcome};

use super::batch::{Batch, Taken};
use super::cover::Covers;
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
    /// The shadow boards this live consumer may apply beside its own.
    covers: Option<Arc<Covers>>,
    /// Per partition, the shadows the batch before applied there (bits):
    /// the next batch goes on with them.
    continuing: HashMap<TopicPartition, u64>,
    /// The shadows' rules' output buffer, like `updates`.
    aside: Vec<rules::Update<'static>>,
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
        covers: Option<Arc<Covers>>,
    ) -> Intake {
        Intake {
            covers,
            continuing: HashMap::new(),
            aside: Vec::new(),
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

    /// Forgets which shadows the partitions' batches applied (they are
    /// sought again: a rewind, a new assignment, a revoke); all when
    /// `parts` is `None`.
    pub(crate) fn forget_cover(&mut self, parts: Option<&[TopicPartition]>) {
        match parts {
            Some(parts) => {
                for p in parts {
                    self.continuing.remove(p);
                }
            }
            None => self.continuing.clear(),
        }
    }

    /// The shadows the batches of `part` go on applying (bits).
    pub(crate) fn cover_bits(&self, part: &TopicPartition) -> u64 {
        self.continuing.get(part).copied().unwrap_or(0)
    }

    /// A takeover (`cover.rs`): the partition is read again from where the
    /// shadows `bits` are complete, and its batches apply them from there,
    /// the one being built included (its messages of the partition were
    /// dropped).
    pub(crate) fn take_over(&mut self, part: &TopicPartition, bits: u64, building: &mut Batch) {
        *self.continuing.entry(part.clone()).or_insert(0) |= bits;
        if let Some(i) = building.record.index_of(part)
            && let Some(b) = building.covered.get_mut(usize::from(i))
        {
            *b |= bits;
        }
    }

    /// The shadows `batch` applies beside the live boards in partition
    /// `part` (bits), decided at its first message there, at `offset`.
    fn covered(
        &mut self,
        batch: &mut Batch,
        part: u16,
        (topic, partition, offset): (&Arc<str>, i32, i64),
    ) -> u64 {
        let Some(covers) = &self.covers else {
            return 0;
        };
        let part = usize::from(part);
        if let Some(&bits) = batch.covered.get(part) {
            return bits;
        }
        // A released message's partition (never covered) may come first.
        batch.covered.resize(part, 0);
        let key = (topic.clone(), partition);
        let before = self.continuing.get(&key).copied().unwrap_or(0);
        let field = keys::partition_field(topic, partition);
        let mut bits = 0;
        for (s, shadow) in covers.shadows().iter().enumerate() {
            let continuing = before & (1 << s) != 0;
            if covers.applies_from((s, &field), offset, continuing) {
                bits |= 1 << s;
                if !continuing {
                    tracing::info!(board = %shadow.name, partition = %field, offset, "The live consumers apply the shadow board in this partition from here: its backfill reached them.");
                }
            }
        }
        self.continuing.insert(key, bits);
        batch.covered.push(bits);
        bits
    }

    /// Adds the updates of the shadows `bits` to `batch`, each from its own
    /// rules; a shadow whose rules fail on the event leaves it out, as its
    /// backfill would.
    fn add_aside(
        &mut self,
        batch: &mut Batch,
        bits: u64,
        event: &crate::event::Event,
        (taken, now): (Taken, i64),
    ) {
        let Some(covers) = &self.covers else {
            return;
        };
        let mut aside = recycle(std::mem::take(&mut self.aside));
        for (s, shadow) in covers.shadows().iter().enumerate() {
            if bits & (1 << s) == 0 {
                continue;
            }
            if let Err(e) = rules::evaluate(&shadow.rules, event, &mut aside) {
                tracing::debug!(board = %shadow.name, error = %e, "A shadow board's rules failed on an event; the shadow leaves it out.");
            }
        }
        if !aside.is_empty() {
            batch.add_aside(
                &self.boards,
                &mut self.resolver,
                taken,
                &mut aside,
                (now, &self.snapshot),
            );
        }
        self.aside = recycle(aside);
    }

    /// Decodes one message read at clock `now` and adds it to `batch`.
    pub(crate) fn take<M: Message>(&mut self, batch: &mut Batch, msg: &M, now: i64) {
        let topic = self.intern(msg.topic());
        let part = batch.take_message(&topic, msg.partition(), msg.offset());
        let cover = self.covered(batch, part, (&topic, msg.partition(), msg.offset()));
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
        let taken = Taken {
            part,
            offset: msg.offset(),
            ts: event.ts,
            kind: event.kind,
        };
        if cover != 0 {
            self.add_aside(batch, cover, &event, (taken, now));
        }
        let mut updates = recycle(std::mem::take(&mut self.updates));
        if let Err(e) = rules::evaluate(&self.boards, &event, &mut updates) {
            self.updates = recycle(updates);
            let why = reject(Some(event.kind), e.reason(), e.to_string());
            return self.reject(batch, &topic, msg, why);
        }
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
