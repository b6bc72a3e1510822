//! A batch's events that wait for their rate checks (docs/checks.md): what
//! the sink needs to decide them ([`Candidate`]) and what the engine needs
//! if one is quarantined (its message, and the outcome it was counted
//! with), kept side by side.
//!
//! Every event of a checked type passes through here, so nothing in it is
//! allocated per event: the messages' keys and payloads are copied into
//! buffers of [`CHUNK`] bytes that never move (only a quarantined one is
//! copied out again), and each member's id is allocated once per batch and
//! shared by its events.

use std::collections::HashSet;
use std::sync::Arc;

use crate::sink::rates::Candidate;
use crate::telemetry::Outcome;

/// Size of the buffers that hold the messages: growing one buffer would
/// copy everything held so far at each doubling.
const CHUNK: usize = 1 << 20;

/// Room for this many events when a batch gets its first.
const START: usize = 4096;

/// A rated event's message, for the quarantine topic: where its key and
/// payload are in the batch's buffers (its partition is the candidate's).
#[derive(Debug, Clone)]
pub(crate) struct Held {
    key: Option<Span>,
    payload: Span,
    /// The outcome the batch counted it with when it was taken
    /// (`Applied`: it is among the events waiting for Redis).
    pub(crate) outcome: Outcome,
}

/// Where held bytes are: which buffer, and where in it (32 bits each: a
/// buffer holds at most a message over [`CHUNK`], and a batch far fewer
/// than 2^32 buffers).
#[derive(Debug, Clone, Copy)]
struct Span {
    chunk: u32,
    start: u32,
    end: u32,
}

/// The message of a rated event, as the consumer received it.
pub(crate) struct Message<'a> {
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) payload: &'a [u8],
}

/// The batch's rated events, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Rated {
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) held: Vec<Held>,
    /// The held messages' keys and payloads, one after another.
    bytes: Vec<Vec<u8>>,
    /// The members' ids seen in this batch.
    members: HashSet<Arc<str>, foldhash::fast::RandomState>,
}

impl Rated {
    pub(crate) fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    /// The shared id `member` (allocated the first time in the batch).
    pub(crate) fn member(&mut self, member: &str) -> Arc<str> {
        if let Some(m) = self.members.get(member) {
            return m.clone();
        }
        let m: Arc<str> = Arc::from(member);
        self.members.insert(m.clone());
        m
    }

    pub(crate) fn push(&mut self, candidate: Candidate, msg: Message<'_>, outcome: Outcome) {
        if self.candidates.capacity() == 0 {
            // Batches of checked events are seldom small.
            self.candidates.reserve(START);
            self.held.reserve(START);
        }
        let key = msg.key.map(|k| self.keep(k));
        let payload = self.keep(msg.payload);
        self.candidates.push(candidate);
        self.held.push(Held {
            key,
            payload,
            outcome,
        });
    }

    fn keep(&mut self, bytes: &[u8]) -> Span {
        let fits = self
            .bytes
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= bytes.len());
        if !fits {
            self.bytes.push(Vec::with_capacity(CHUNK.max(bytes.len())));
        }
        let chunk = self.bytes.len() - 1;
        let buffer = &mut self.bytes[chunk];
        let start = buffer.len();
        buffer.extend_from_slice(bytes);
        // A message is at most `[kafka] max_event_bytes` plus its key, and
        // librdkafka's own limit keeps both far under 4 GiB.
        let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Span {
            chunk: at(chunk),
            start: at(start),
            end: at(buffer.len()),
        }
    }

    fn bytes(&self, span: &Span) -> Vec<u8> {
        self.bytes
            .get(span.chunk as usize)
            .and_then(|b| b.get(span.start as usize..span.end as usize))
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// The key and payload of a held message.
    pub(crate) fn message(&self, held: &Held) -> (Option<Vec<u8>>, Vec<u8>) {
        let key = held.key.as_ref().map(|k| self.bytes(k));
        (key, self.bytes(&held.payload))
    }

    /// Drops the events of revoked partitions (their next owner takes them
    /// again).
    pub(crate) fn drop_partitions(&mut self, gone: &[u16]) {
        let mut keep = self.candidates.iter().map(|c| !gone.contains(&c.part));
        self.held.retain(|_| keep.next().unwrap_or(true));
        self.candidates.retain(|c| !gone.contains(&c.part));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;

    fn candidate(rated: &mut Rated, part: u16, offset: i64, member: &str) -> Candidate {
        Candidate {
            part,
            offset,
            ts: offset,
            kind: EventType::Gift,
            member: rated.member(member),
        }
    }

    #[test]
    fn held_messages_come_back_as_received_and_members_are_shared() {
        let mut rated = Rated::default();
        // Two payloads that do not fit one buffer together, and one larger
        // than a buffer.
        let (big, bigger) = (vec![7u8; CHUNK * 3 / 5], vec![9u8; CHUNK + 10]);
        type Sent<'a> = (u16, &'a str, Option<&'a [u8]>, &'a [u8]);
        let sent: [Sent<'_>; 7] = [
            (0, "ann", Some(b"k0"), b"{\"a\":1}"),
            (1, "bob", None, b""),
            (0, "ann", Some(b""), b"{\"a\":3}"),
            (2, "cy", Some(b"k3"), &big),
            (2, "cy", Some(b"k4"), &big),
            (0, "dee", None, &bigger),
            (0, "ann", Some(b"k6"), b"{\"a\":7}"),
        ];
        for (i, (part, member, key, payload)) in sent.iter().enumerate() {
            let c = candidate(&mut rated, *part, i as i64, member);
            let msg = Message { key: *key, payload };
            rated.push(c, msg, Outcome::Applied);
        }
        assert!(Arc::ptr_eq(
            &rated.candidates[0].member,
            &rated.candidates[2].member
        ));
        rated.drop_partitions(&[1]);
        let offsets: Vec<i64> = rated.candidates.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, vec![0, 2, 3, 4, 5, 6]);
        // The small ones and a big one; the second big one; the larger one
        // alone (its buffer is full); the last.
        assert_eq!(rated.bytes.len(), 4, "buffers");
        let expected = [sent[0], sent[2], sent[3], sent[4], sent[5], sent[6]];
        let held = rated.held.iter().zip(&rated.candidates);
        for ((held, c), (part, _, key, payload)) in held.zip(expected) {
            assert_eq!(c.part, part);
            let (k, p) = rated.message(held);
            assert_eq!(k.as_deref(), key);
            assert_eq!(p, payload);
        }
    }
}
