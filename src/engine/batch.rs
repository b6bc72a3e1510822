//! One batch in the making: the engine's [`Record`] of the messages taken
//! since the last flush (offsets, outcomes, dead letters) beside the
//! sink's [`Updates`] they bring, kept in step by this type alone: a
//! partition met for the first time gets the same index in both, and an
//! event's outcome is recorded as its updates are added.

use std::sync::Arc;

use tokio::time::Instant;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::resolve::Resolver;
use crate::checks::CheckSet;
use crate::deadletter::{DeadLetter, Verdict};
use crate::event::EventType;
use crate::moderation::{Route, Snapshot};
use crate::rules::Update;
use crate::sink::rates::Decision;
use crate::sink::report::FlushReport;
use crate::sink::updates::{Added, At, EventSet, Updates};
use crate::source::TopicPartition;
use crate::telemetry::Outcome;

use super::rated::Rated;
use super::record::{AppliedEvent, Record, Settled};

/// A decoded event, for [`Batch::add_event`].
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    /// Index of its partition, from [`Batch::take_message`].
    pub part: u16,
    /// Its offset.
    pub offset: i64,
    /// Its event time (ms).
    pub ts: i64,
    /// Its type.
    pub kind: EventType,
}

/// One batch: what the engine reports once it is acknowledged, and what
/// the sink writes.
#[derive(Debug, Default)]
pub struct Batch {
    /// Offsets, outcomes and dead letters.
    pub(crate) record: Record,
    /// The board updates, per board instance.
    pub updates: Updates,
    /// The events whose rate checks are decided when it is flushed.
    pub(crate) rated: Rated,
    /// Per partition index, the shadow boards (bits, by index in
    /// `engine::cover::Covers`) the batch applies beside the live boards
    /// in that partition (docs/rebuilds.md); empty in a backfill's batch.
    pub(crate) covered: Vec<u64>,
}

impl Batch {
    /// An empty batch sized like `self` (see [`Updates::sized_like`]).
    pub(crate) fn sized_like(&self) -> Batch {
        Batch {
            updates: self.updates.sized_like(),
            ..Batch::default()
        }
    }

    /// Whether no message was taken yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.record.messages == 0
    }

    /// Messages taken (the `max_events` measure).
    pub(crate) fn messages(&self) -> usize {
        self.record.messages
    }

    /// When the first message arrived (the `max_delay_ms` measure).
    pub(crate) fn opened_at(&self) -> Option<Instant> {
        self.record.opened_at
    }

    /// Registers a message of `topic/partition` at `offset`; every message
    /// taken must be registered so its offset is committed with the batch.
    /// Returns its partition's index.
    pub fn take_message(&mut self, topic: &Arc<str>, partition: i32, offset: i64) -> u16 {
        let (part, new) = self.record.take_message(topic, partition, offset);
        if new {
            self.updates
                .add_partition(keys::partition_field(topic, partition));
        }
        part
    }

    /// Registers a released quarantined message (`rankflow release`) of
    /// `source` at `offset`: its updates carry the fence field
    /// `release:<source>` instead of their partition's, so they are applied
    /// once however often it is released. Returns its partition's index.
    pub fn take_release(&mut self, source: &Arc<str>, offset: i64) -> u16 {
        let (part, new) = self.record.take_message(source, -1, offset);
        if new {
            self.updates.add_partition(format!("release:{source}"));
        }
        part
    }

    /// Counts an event of partition `part` that will not reach Redis
    /// (filtered, invalid, late on arrival).
    pub(crate) fn count(&mut self, part: u16, kind: Option<EventType>, outcome: Outcome) {
        self.record.count(part, kind, outcome);
    }

    /// Adds one decoded event's board updates and records it; returns its
    /// outcome (`Applied` meaning "to be settled when the batch is
    /// acknowledged").
    pub fn add_event(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        event: Taken,
        updates: &[Update<'_>],
        now: i64,
    ) -> Outcome {
        self.add(boards, resolver, event, updates, now)
    }

    /// [`Batch::add_event`] for a fleet where members may be erased
    /// (`snap`, docs/moderation.md): updates of erased members are dropped
    /// here, and an event left with none counts `erased`. Whether the
    /// others go to views or twins (hidden members) is decided when the
    /// batch is encoded, with the record as it is then, and counted when
    /// it is settled.
    pub fn add_moderated_event(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        event: Taken,
        updates: &mut Vec<Update<'_>>,
        now: i64,
        snap: &Snapshot,
    ) -> Outcome {
        // Only erasures matter here (hidden members are routed when the
        // batch is encoded): no look-up at all while nobody is erased.
        if snap.has_erased() && !updates.is_empty() {
            updates.retain(|u| !snap.is_erased(&u.member));
            if updates.is_empty() {
                self.record
                    .count(event.part, Some(event.kind), Outcome::Erased);
                return Outcome::Erased;
            }
        }
        self.add(boards, resolver, event, updates, now)
    }

    fn add(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        event: Taken,
        updates: &[Update<'_>],
        now: i64,
    ) -> Outcome {
        let at = At {
            part: event.part,
            offset: event.offset,
            ts: event.ts,
        };
        let outcome = match self.updates.add(boards, resolver, at, updates, now) {
            Added::Some => {
                self.record.applying(AppliedEvent {
                    part: event.part,
                    offset: event.offset,
                    ts: event.ts,
                    kind: event.kind,
                });
                return Outcome::Applied;
            }
            Added::None => Outcome::Filtered,
            Added::Late => Outcome::Late,
        };
        self.record.count(event.part, Some(event.kind), outcome);
        outcome
    }

    /// Adds the updates of shadow boards the batch applies beside the live
    /// ones (docs/rebuilds.md): written like the others, but the event's
    /// outcome is the live boards' alone. An erased member's are dropped.
    pub(crate) fn add_aside(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        event: Taken,
        updates: &mut Vec<Update<'_>>,
        (now, snap): (i64, &Snapshot),
    ) {
        if !snap.is_empty() {
            updates.retain(|u| snap.route(u.board, &u.member) != Route::Erased);
        }
        let at = At {
            part: event.part,
            offset: event.offset,
            ts: event.ts,
        };
        self.updates
            .add_to(boards, resolver, at, (updates.as_slice(), true), now);
    }

    /// Stops applying the shadow board `board` (bit `bit`) beside the live
    /// boards in partition `part`: its updates from there leave the batch.
    pub(crate) fn uncover(&mut self, (bit, board): (usize, usize), part: u16) {
        if let Some(bits) = self.covered.get_mut(usize::from(part)) {
            *bits &= !(1 << bit);
        }
        self.updates.drop_aside(board, part);
    }

    /// Drops everything of the given partitions (they were revoked: their
    /// uncommitted messages will be read again, and counted, by the next
    /// owner).
    pub(crate) fn drop_partitions(&mut self, revoked: &[TopicPartition]) {
        let gone = self.record.drop_partitions(revoked);
        if !gone.is_empty() {
            self.updates.drop_partitions(&gone);
            self.rated.drop_partitions(&gone);
            for &part in &gone {
                if let Some(bits) = self.covered.get_mut(usize::from(part)) {
                    *bits = 0;
                }
            }
        }
    }

    /// Applies the rate checks' decisions on the rated events (in their
    /// order): a failed event leaves the boards' updates and its count,
    /// counts `quarantined` and becomes a letter for the quarantine topic;
    /// one that an earlier batch dealt with leaves the live boards'
    /// updates too, uncounted (not those of shadows applied beside them).
    /// Answers whether any event left the updates.
    pub(crate) fn quarantine_rated(&mut self, checks: &CheckSet, decisions: &[Decision]) -> bool {
        let mut gone = EventSet::default();
        let mut dealt = EventSet::default();
        let rated = std::mem::take(&mut self.rated);
        for ((c, held), decision) in rated.candidates.iter().zip(&rated.held).zip(decisions) {
            let check = match *decision {
                Decision::Pass => continue,
                // Applied or quarantined before, in a batch that got
                // through: nothing to do again, nor to count (its fences
                // need not cover an event that was quarantined).
                Decision::Applied => {
                    dealt.insert((c.part, c.offset));
                    self.record.uncount(c.kind, held.outcome, c.part);
                    continue;
                }
                Decision::Failed(i) => checks.rates(c.kind).and_then(|g| g.checks.get(i)),
            };
            let Some(check) = check else {
                continue;
            };
            gone.insert((c.part, c.offset));
            self.record.uncount(c.kind, held.outcome, c.part);
            self.record
                .count(c.part, Some(c.kind), Outcome::Quarantined);
            let rate = check.rate;
            let (key, payload) = rated.message(held);
            // Every candidate's partition is one the batch registered.
            let source = self.record.parts.get(usize::from(c.part));
            self.record.dead_letters.push(DeadLetter {
                topic: source.map_or_else(|| Arc::from(""), |p| p.topic.clone()),
                partition: source.map_or(-1, |p| p.partition),
                offset: c.offset,
                key,
                payload,
                why: Verdict::Quarantined(check.name.clone()),
                detail: format!(
                    "member {:?} had {} events within {} ms of event time before {} (max_rate {}/{} ms)",
                    c.member, rate.count, rate.length_ms, c.ts, rate.count, rate.length_ms
                ),
            });
        }
        if !gone.is_empty() {
            self.updates.drop_events(&gone);
            self.record.drop_applied(&gone);
        }
        if !dealt.is_empty() {
            // The shadows beside the live boards may not have had them:
            // the flush settles theirs (`flush.rs`).
            self.updates.drop_live_events(&dealt);
            self.record.drop_applied(&dealt);
        }
        self.rated = rated;
        !gone.is_empty() || !dealt.is_empty()
    }

    /// Drops the events `gone` (partition index, offset): the live
    /// consumers' checks quarantined them (a shadow board's backfill).
    pub(crate) fn drop_events(&mut self, gone: &EventSet) {
        self.updates.drop_events(gone);
        self.record.drop_applied(gone);
    }

    /// The batch's final counts, given what Redis reported applying it
    /// (see [`Record::settle`]).
    pub fn settle(&self, report: &FlushReport) -> Settled {
        self.record.settle(self.updates.fates(report).as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::event::Decoder;
    use crate::sink::reply::CLOSED_CUTOFF;

    const TS: i64 = 1_763_700_000_000;

    fn boards() -> BoardSet {
        let text = r#"
[[board]]
            name = "fans"
            event = "gift"
            member = "sender_id"
            score = "count"
            periods = ["all"]
            windows = ["1h/1m"]
            [[board]]
            name = "recent"
            event = "gift"
            member = "receiver_id"
            score = "count"
            windows = ["1h/1m"]
        "#;
        crate::config::test_boards(text)
    }

    /// Adds a gift of `partition` at `offset` to the batch, as the engine does.
    fn gift(batch: &mut Batch, set: &BoardSet, partition: i32, offset: i64) -> Outcome {
        gift_at(batch, set, partition, offset, TS)
    }

    /// [`gift`] with the consumer's clock at `now`.
    fn gift_at(
        batch: &mut Batch,
        set: &BoardSet,
        partition: i32,
        offset: i64,
        now: i64,
    ) -> Outcome {
        gift_of(batch, set, (partition, offset), ("s", "r"), now)
    }

    /// A gift of `sender` to `receiver` (the members of `fans` and of
    /// `recent`).
    fn gift_of(
        batch: &mut Batch,
        set: &BoardSet,
        (partition, offset): (i32, i64),
        (sender, receiver): (&str, &str),
        now: i64,
    ) -> Outcome {
        let json = serde_json::json!({
            "type": "gift", "event_id": format!("e{partition}-{offset}"), "ts": TS,
            "sender_id": sender, "receiver_id": receiver, "gift_id": "g", "count": 1, "value": 1
        });
        let event = Decoder::new(65536)
            .unwrap()
            .decode(json.to_string().as_bytes())
            .unwrap();
        let mut updates = Vec::new();
        crate::rules::evaluate(set, &event, &mut updates).unwrap();
        let topic: Arc<str> = Arc::from("t");
        let part = batch.take_message(&topic, partition, offset);
        let taken = Taken {
            part,
            offset,
            ts: event.ts,
            kind: event.kind,
        };
        let mut resolver = Resolver::new(set);
        batch.add_event(set, &mut resolver, taken, &updates, now)
    }

    fn counts(settled: &Settled) -> Vec<(Outcome, u64)> {
        settled
            .outcomes
            .iter()
            .map(|(_, _, o, n)| (*o, *n))
            .collect()
    }

    fn report(set: &BoardSet) -> FlushReport {
        FlushReport {
            boards: vec![Default::default(); set.boards.len()],
            ..FlushReport::default()
        }
    }

    #[test]
    fn a_revoked_partition_takes_its_counts_and_lags_with_it() {
        let set = boards();
        let mut batch = Batch::default();
        for offset in 0..3 {
            gift(&mut batch, &set, 0, offset);
            gift(&mut batch, &set, 1, offset);
        }
        let part = batch.take_message(&Arc::from("t"), 1, 3);
        batch.count(part, None, Outcome::Invalid);
        batch.drop_partitions(&[(Arc::from("t"), 1)]);
        let settled = batch.settle(&report(&set));
        // Only partition 0's three events: the next owner of partition 1
        // counts its four messages.
        assert_eq!(counts(&settled), vec![(Outcome::Applied, 3)]);
        assert_eq!(settled.applied_ts.len(), 3);
    }

    #[test]
    fn an_event_counts_hidden_only_when_every_update_it_got_taken_went_to_a_twin() {
        use crate::moderation::{MemberHasher, Snapshot};
        let set = boards();
        let mut batch = Batch::default();
        // (partition, offset), (sender: member of `fans`, receiver: member
        // of `recent`), and the outcome each must settle as, by hand (None:
        // not counted): `h` is hidden from every board, `f` from `fans`.
        // Partition 1 has `recent` fenced at offset 0, partition 2 both
        // boards.
        let table = [
            ((0, 0), ("s", "r"), Some(Outcome::Applied)),
            ((0, 1), ("f", "r"), Some(Outcome::Applied)),
            ((0, 2), ("h", "r"), Some(Outcome::Applied)),
            ((0, 3), ("h", "h"), Some(Outcome::Hidden)),
            ((0, 4), ("f", "h"), Some(Outcome::Hidden)),
            ((0, 5), ("s", "h"), Some(Outcome::Applied)),
            ((1, 0), ("h", "r"), Some(Outcome::Hidden)),
            ((1, 1), ("s", "r"), Some(Outcome::Applied)),
            ((2, 0), ("h", "h"), None),
        ];
        for (at, members, _) in table {
            gift_of(&mut batch, &set, at, members, TS);
        }
        let hidden_from = |boards: &str| format!(r#"{{"boards":{boards},"at":1,"actor":"cli"}}"#);
        let fields = vec![
            ("h:h".to_string(), hidden_from("null")),
            ("h:f".to_string(), hidden_from(r#"["fans"]"#)),
        ];
        let snap = Snapshot::from_fields(&fields, &set, MemberHasher::new(None));
        let mut r = report(&set);
        r.moderation = Some(Arc::new(snap));
        // Partition indexes in the order the batch met them.
        let (p1, p2) = (1u16, 2u16);
        for (i, inst) in batch.updates.instances.iter().enumerate() {
            let fences = r.fenced.entry(i as u32).or_default();
            fences.insert(p2, 0);
            if inst.board == 1 {
                fences.insert(p1, 0);
            }
        }
        let mut want: HashMap<Outcome, u64> = HashMap::new();
        for (_, _, outcome) in table {
            if let Some(outcome) = outcome {
                *want.entry(outcome).or_default() += 1;
            }
        }
        // Counts come per partition: summed.
        let mut got: HashMap<Outcome, u64> = HashMap::new();
        for (outcome, n) in counts(&batch.settle(&r)) {
            *got.entry(outcome).or_default() += n;
        }
        assert_eq!(got, want);
    }

    #[test]
    fn an_event_one_view_took_is_applied_though_its_window_updates_were_late() {
        let set = boards();
        let mut batch = Batch::default();
        gift(&mut batch, &set, 0, 0);
        let recent = batch
            .updates
            .instances
            .iter()
            .position(|i| i.board == 1)
            .unwrap() as u32;
        let mut r = report(&set);
        // The script's cutoff passed the bucket on both views of `recent`,
        // but `fans` took its updates: the event is applied.
        let bucket_end = batch.updates.instances[recent as usize].updates[0].bucket_end;
        r.late_cutoffs.insert(recent, vec![bucket_end]);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 1)]);
        // Every instance found it late: late, and no lag sample.
        for (i, inst) in batch.updates.instances.iter().enumerate() {
            let cutoffs = inst
                .views
                .iter()
                .map(|v| {
                    if v.window_ms.is_some() {
                        bucket_end
                    } else {
                        -1
                    }
                })
                .collect();
            r.late_cutoffs.insert(i as u32, cutoffs);
        }
        let settled = batch.settle(&r);
        let fans_period_is_not_late = batch
            .updates
            .instances
            .iter()
            .any(|i| i.views.iter().any(|v| v.window_ms.is_none()));
        assert!(fans_period_is_not_late, "the all-time view is never late");
        assert_eq!(counts(&settled), vec![(Outcome::Applied, 1)]);
    }

    #[test]
    fn late_only_when_no_view_took_the_event() {
        let set = boards();
        let mut batch = Batch::default();
        gift(&mut batch, &set, 0, 0);
        gift(&mut batch, &set, 0, 1);
        let recent = batch
            .updates
            .instances
            .iter()
            .position(|i| i.board == 1)
            .unwrap();
        // Drop the instances other than `recent` to look at one board.
        let bucket_end = batch.updates.instances[recent].updates[0].bucket_end;
        let mut r = report(&set);
        for (i, _) in batch.updates.instances.iter().enumerate() {
            r.late_cutoffs.insert(i as u32, vec![bucket_end; 2]);
        }
        batch.updates.instances.retain(|i| i.board == 1);
        let settled = batch.settle(&r);
        assert_eq!(counts(&settled), vec![(Outcome::Late, 2)]);
        assert!(settled.applied_ts.is_empty());
    }

    #[test]
    fn events_the_fences_showed_applied_are_not_counted_again() {
        let set = boards();
        let mut batch = Batch::default();
        for offset in 0..4 {
            gift(&mut batch, &set, 0, offset);
        }
        let mut r = report(&set);
        // Another consumer applied offsets up to 1 on every instance.
        for i in 0..batch.updates.instances.len() as u32 {
            r.fenced.insert(i, HashMap::from([(0u16, 1i64)]));
        }
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 2)]);
        // On one instance only: every event still changed a board here.
        r.fenced.retain(|i, _| *i == 0);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 4)]);
    }

    #[test]
    fn filtered_and_invalid_counts_are_kept_per_topic_and_type() {
        let set = boards();
        let mut batch = Batch::default();
        gift(&mut batch, &set, 0, 0);
        let topic: Arc<str> = Arc::from("t");
        let part = batch.take_message(&topic, 0, 1);
        batch.count(part, None, Outcome::Invalid);
        let settled = batch.settle(&report(&set));
        assert_eq!(
            settled.outcomes,
            vec![
                (topic.clone(), None, Outcome::Invalid, 1),
                (topic, Some(EventType::Gift), Outcome::Applied, 1),
            ]
        );
    }

    const DAY: i64 = 86_400_000;
    const GRACE: i64 = 600_000;

    /// `days` archives its day (10 min of grace); `totals` counts the same
    /// gifts all-time, unarchived.
    fn archived_boards() -> BoardSet {
        crate::config::test_boards(
            r#"
            [archive]
            url = "postgres://127.0.0.1:1/none"
            grace = "10m"
            [[board]]
            name = "days"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["day"]
            archive = ["day"]
            [[board]]
            name = "totals"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["all"]
        "#,
        )
    }

    /// The close of the UTC day of [`TS`], computed apart from the calendar code.
    fn close_of_ts_day() -> i64 {
        (TS.div_euclid(DAY) + 1) * DAY + GRACE
    }

    #[test]
    fn an_archived_day_is_sent_without_expiry_and_with_its_close_time() {
        let set = archived_boards();
        let mut batch = Batch::default();
        assert_eq!(gift(&mut batch, &set, 0, 0), Outcome::Applied);
        let days = batch
            .updates
            .instances
            .iter()
            .find(|i| i.board == 0)
            .unwrap();
        let v = &days.views[0];
        assert_eq!(&*v.id, "day:2025-11-21");
        assert_eq!(v.expire_at, 0, "no expiry until the archiver sets it");
        assert_eq!(v.close_at, Some(close_of_ts_day()));
        assert_eq!(v.keep_until, close_of_ts_day() - GRACE + 35 * DAY);
        let due = crate::sink::due::wanted(
            &batch.updates.instances,
            &Default::default(),
            std::time::Instant::now(),
        );
        assert_eq!(
            due,
            vec![(close_of_ts_day(), "{days}:day:2025-11-21".to_string())],
            "only the archived view is due"
        );
    }

    #[test]
    fn a_period_closed_by_the_clock_takes_nothing_and_counts_late_alone() {
        let set = archived_boards();
        let mut batch = Batch::default();
        // One ms before the close it is taken; at the close it is late on
        // `days`, but `totals` takes the event, so it is applied.
        gift_at(&mut batch, &set, 0, 0, close_of_ts_day() - 1);
        assert_eq!(batch.updates.instances[0].updates.len(), 1);
        gift_at(&mut batch, &set, 0, 1, close_of_ts_day());
        let days = batch
            .updates
            .instances
            .iter()
            .find(|i| i.board == 0)
            .unwrap();
        assert_eq!(days.updates.len(), 1, "the closed day got no update");
        let settled = batch.settle(&report(&set));
        assert_eq!(counts(&settled), vec![(Outcome::Applied, 2)]);
        // With only the archived board, the event is late on arrival.
        let only_days = crate::config::test_boards(
            r#"
            [archive]
            url = "postgres://127.0.0.1:1/none"
            [[board]]
            name = "days"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["day"]
            archive = ["day"]
        "#,
        );
        let mut batch = Batch::default();
        assert_eq!(
            gift_at(&mut batch, &only_days, 0, 0, close_of_ts_day()),
            Outcome::Late
        );
        assert!(batch.updates.instances.iter().all(|i| i.updates.is_empty()));
        assert_eq!(
            counts(&batch.settle(&report(&only_days))),
            vec![(Outcome::Late, 1)]
        );
    }

    #[test]
    fn updates_of_a_period_the_script_found_closed_are_late() {
        let set = archived_boards();
        let mut batch = Batch::default();
        gift(&mut batch, &set, 0, 0);
        gift(&mut batch, &set, 0, 1);
        let days = batch
            .updates
            .instances
            .iter()
            .position(|i| i.board == 0)
            .unwrap() as u32;
        let mut r = report(&set);
        // An open period's -1 makes nothing late.
        r.late_cutoffs.insert(days, vec![-1]);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 2)]);
        // Closed on `days`, but `totals` took both events: applied.
        r.late_cutoffs.insert(days, vec![CLOSED_CUTOFF]);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 2)]);
        // Without `totals`, every update of both events hit the closed
        // day: both are late, with no lag samples.
        batch.updates.instances.retain(|i| i.board == 0);
        let r = FlushReport {
            late_cutoffs: HashMap::from([(0, vec![CLOSED_CUTOFF])]),
            ..report(&set)
        };
        let settled = batch.settle(&r);
        assert_eq!(counts(&settled), vec![(Outcome::Late, 2)]);
        assert!(settled.applied_ts.is_empty());
    }
}
