//! One batch in the making: the messages taken from Kafka since the last
//! flush, as raw per-view updates grouped by board instance, plus what the
//! batch must report once Redis has acknowledged it (offsets per partition,
//! outcome counts, event times for the lag histogram, dead letters).
//!
//! Outcome counts are kept per partition, so that a revoked partition's
//! share leaves the batch whole (its next owner counts those events).
//! Events headed for `applied` are kept one by one until Redis answered:
//! an event whose every update the script found late (its window bucket
//! left the window meanwhile, or its archived period had been closed by the
//! archiver's `K:closed` marker) is counted `late`, and one whose every
//! update the fences showed applied already is not counted here at all
//! (whoever applied it counted it); see [`Batch::settle`].
//!
//! Updates are kept raw (with their partition and offset) rather than
//! pre-aggregated on arrival, because a fence conflict (src/sink/call.rs)
//! must be able to rebuild an instance's call without the events another
//! consumer already applied.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::resolve::Resolver;
use crate::deadletter::DeadLetter;
use crate::event::EventType;
use crate::rules::Update;
pub use crate::telemetry::Outcome;

use super::FlushReport;
use super::aggregate::{Agg, FieldAggs, field_aggs};
use super::call::CLOSED_CUTOFF;

/// A partition's share of the batch.
#[derive(Debug, Clone)]
pub struct PartState {
    pub topic: Arc<str>,
    pub partition: i32,
    /// `<topic>/<partition>`, the fence field.
    pub field: String,
    /// Lowest and highest offset taken into the batch (applied, filtered
    /// or invalid).
    pub first_offset: i64,
    pub last_offset: i64,
}

/// One concrete view of an instance touched by the batch.
#[derive(Debug, Clone)]
pub struct ConcreteView {
    /// (index of the view in the board, period start or 0 for windows).
    identity: (usize, i64),
    pub id: Arc<str>,
    /// Window length for windows, `None` for periods.
    pub window_ms: Option<i64>,
    /// Latest expiry wanted by any update (0 = none; always 0 for an
    /// archived period, whose expiry the archiver sets after the copy).
    pub expire_at: i64,
    /// Until when the view is meant to live (0 = forever): what the
    /// instance's fences must outlive, archived or not.
    pub keep_until: i64,
    /// For a period of an archived view: when it closes (`end + grace`).
    /// Such a view's call carries its `K:closed` marker, and the period is
    /// registered in the due set before it is applied.
    pub close_at: Option<i64>,
}

/// One event's contribution to one view.
#[derive(Debug, Clone)]
pub struct Raw {
    pub part: u16,
    pub offset: i64,
    pub view: u16,
    /// Index into [`Batch::members`].
    pub member: u32,
    pub agg: Agg,
    /// A composite board's fields (boxed: plain boards, the common case,
    /// keep their updates small).
    pub fields: Option<Box<FieldAggs>>,
    /// Window bucket end; 0 for periods.
    pub bucket_end: i64,
}

/// A board instance (board + scope value) touched by the batch.
#[derive(Debug)]
pub struct Instance {
    pub board: usize,
    /// Hash tag content (`board` or `board:<escaped scope>`).
    pub tag: String,
    /// Few per instance (one per view, more only when a batch spans a
    /// period boundary), so found by a scan.
    pub views: Vec<ConcreteView>,
    pub updates: Vec<Raw>,
}

/// Hash maps keyed by strings on the hot path: foldhash is several times
/// faster than the default SipHash, and the keys are not attacker-chosen
/// in a way that matters (a collision only costs time within one batch).
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// No instance yet (in [`Batch`]'s `unscoped`).
const NO_INSTANCE: u32 = u32::MAX;

/// Counts per (partition index, event type, outcome) for
/// `rankflow_events_total`: filtered, invalid and late-on-arrival events
/// (applied ones are settled after the flush, from [`Batch::applied`]).
pub type OutcomeCounts = HashMap<(u16, Option<EventType>, Outcome), u64>;

/// An event with at least one update in the batch: `applied` if Redis
/// takes one of them.
#[derive(Debug, Clone, Copy)]
pub struct AppliedEvent {
    pub part: u16,
    pub offset: i64,
    /// Event time, for the lag histogram.
    pub ts: i64,
    pub kind: Option<EventType>,
}

/// What a decoded event is, for [`Batch::add_event`].
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    pub part: u16,
    pub offset: i64,
    pub ts: i64,
    pub kind: EventType,
}

/// A batch's final counts once Redis acknowledged it.
#[derive(Debug, Default, PartialEq)]
pub struct Settled {
    /// (topic, event type, outcome) → events.
    pub outcomes: Vec<(Arc<str>, Option<EventType>, Outcome, u64)>,
    /// Event times of the events counted `applied`.
    pub applied_ts: Vec<i64>,
}

#[derive(Debug, Default)]
pub struct Batch {
    /// Messages taken (the `max_events` measure).
    pub messages: usize,
    /// When the first message arrived (the `max_delay_ms` measure).
    pub opened_at: Option<Instant>,
    pub parts: Vec<PartState>,
    part_index: HashMap<(Arc<str>, i32), u16>,
    pub instances: Vec<Instance>,
    /// Every member named by an update of the batch, once: updates hold
    /// an index, so an event's updates to its ~6 views copy no string and
    /// the calls merge them by integer keys.
    pub members: Vec<Arc<str>>,
    member_index: FastMap<Arc<str>, u32>,
    /// Per board: scope value ("" when unscoped; scopes are never empty) → instance.
    instance_index: Vec<FastMap<Box<str>, u32>>,
    /// Per board: its unscoped instance, found without hashing ("" in
    /// `instance_index` too); [`NO_INSTANCE`] when the batch has none yet.
    unscoped: Vec<u32>,
    pub outcomes: OutcomeCounts,
    /// Events with at least one update, in arrival order.
    pub applied: Vec<AppliedEvent>,
    pub dead_letters: Vec<DeadLetter>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// Registers a message of `topic/partition` at `offset`; every message
    /// taken must be registered so its offset is committed with the batch.
    pub fn take_message(&mut self, topic: &Arc<str>, partition: i32, offset: i64) -> u16 {
        self.messages += 1;
        if self.opened_at.is_none() {
            self.opened_at = Some(Instant::now());
        }
        let idx = match self.part_index.get(&(topic.clone(), partition)) {
            Some(&i) => i,
            None => {
                let i = self.parts.len() as u16;
                self.parts.push(PartState {
                    topic: topic.clone(),
                    partition,
                    field: keys::partition_field(topic, partition),
                    first_offset: offset,
                    last_offset: offset,
                });
                self.part_index.insert((topic.clone(), partition), i);
                i
            }
        };
        let p = &mut self.parts[idx as usize];
        p.first_offset = p.first_offset.min(offset);
        p.last_offset = p.last_offset.max(offset);
        idx
    }

    /// Counts an event of partition `part` that will not reach Redis
    /// (filtered, invalid, late on arrival).
    pub fn count(&mut self, part: u16, kind: Option<EventType>, outcome: Outcome) {
        *self.outcomes.entry((part, kind, outcome)).or_insert(0) += 1;
    }

    /// Adds one decoded event's board updates and counts it; returns its
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
        let outcome = self.add_updates(
            boards,
            resolver,
            event.part,
            event.offset,
            event.ts,
            updates,
            now,
        );
        match outcome {
            Outcome::Applied => {
                if let Some(last) = self.applied.last_mut() {
                    last.kind = Some(event.kind);
                }
            }
            other => self.count(event.part, Some(event.kind), other),
        }
        outcome
    }

    /// Adds one decoded event's board updates without counting it; returns
    /// its outcome (`Applied` meaning "will be applied when the batch is
    /// acknowledged").
    #[allow(clippy::too_many_arguments)]
    pub fn add_updates(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        part: u16,
        offset: i64,
        ts: i64,
        updates: &[Update<'_>],
        now: i64,
    ) -> Outcome {
        if updates.is_empty() {
            return Outcome::Filtered;
        }
        let mut any = false;
        // Boards reading the same field name the same member: such updates
        // share its text (borrowed from the event), and then its index.
        let mut last = None;
        for u in updates {
            let board = &boards.boards[u.board];
            let inst = self.instance(boards, u.board, u.scope.as_deref());
            let member = self.intern_shared(&u.member, &mut last);
            for view in 0..board.views.len() {
                let r = resolver.resolve(boards, u.board, view, ts, now);
                if r.late {
                    continue;
                }
                any = true;
                let instance = &mut self.instances[inst as usize];
                let identity = (view, r.start);
                let v = match instance.views.iter().position(|c| c.identity == identity) {
                    Some(v) => {
                        let cv = &mut instance.views[v];
                        cv.expire_at = cv.expire_at.max(r.expire_at);
                        cv.keep_until = cv.keep_until.max(r.keep_until);
                        v as u16
                    }
                    None => {
                        instance.views.push(ConcreteView {
                            identity,
                            id: r.view_id.clone(),
                            window_ms: r.window_ms,
                            expire_at: r.expire_at,
                            keep_until: r.keep_until,
                            close_at: r.close_at,
                        });
                        (instance.views.len() - 1) as u16
                    }
                };
                instance.updates.push(Raw {
                    part,
                    offset,
                    view: v,
                    member,
                    agg: Agg::new(u.value, ts),
                    fields: u.fields.as_ref().map(|f| Box::new(field_aggs(f, ts))),
                    bucket_end: r.bucket_end.unwrap_or(0),
                });
            }
        }
        if any {
            self.applied.push(AppliedEvent {
                part,
                offset,
                ts,
                kind: None,
            });
            Outcome::Applied
        } else {
            Outcome::Late
        }
    }

    /// [`Batch::intern`], but `last` (the previous text's address,
    /// length and index among one event's updates) answers at once for the
    /// same text: every update of the slice is alive, so two different
    /// texts cannot share an address.
    fn intern_shared(&mut self, text: &str, last: &mut Option<(*const u8, usize, u32)>) -> u32 {
        match *last {
            Some((ptr, len, i)) if ptr == text.as_ptr() && len == text.len() => i,
            _ => {
                let i = self.intern(text);
                *last = Some((text.as_ptr(), text.len(), i));
                i
            }
        }
    }

    /// The index of `member` in [`Batch::members`], added if new.
    fn intern(&mut self, member: &str) -> u32 {
        if let Some(&i) = self.member_index.get(member) {
            return i;
        }
        let i = self.members.len() as u32;
        let name: Arc<str> = Arc::from(member);
        self.members.push(name.clone());
        self.member_index.insert(name, i);
        i
    }

    fn instance(&mut self, boards: &BoardSet, board: usize, scope: Option<&str>) -> u32 {
        if scope.is_none()
            && let Some(&i) = self.unscoped.get(board)
            && i != NO_INSTANCE
        {
            return i;
        }
        if self.instance_index.len() <= board {
            self.instance_index.resize_with(board + 1, FastMap::default);
        }
        let by_scope = &mut self.instance_index[board];
        if let Some(&i) = by_scope.get(scope.unwrap_or("")) {
            return i;
        }
        let i = self.instances.len() as u32;
        self.instances.push(Instance {
            board,
            tag: boards.boards[board].tag(scope),
            views: Vec::new(),
            updates: Vec::new(),
        });
        by_scope.insert(scope.unwrap_or("").into(), i);
        if scope.is_none() {
            if self.unscoped.len() <= board {
                self.unscoped.resize(board + 1, NO_INSTANCE);
            }
            self.unscoped[board] = i;
        }
        i
    }

    /// Drops everything of the given partitions (they were revoked: their
    /// uncommitted messages will be read again, and counted, by the next
    /// owner).
    pub fn drop_partitions(&mut self, revoked: &[(Arc<str>, i32)]) {
        let gone: Vec<u16> = revoked
            .iter()
            .filter_map(|k| self.part_index.get(k).copied())
            .collect();
        if gone.is_empty() {
            return;
        }
        for inst in &mut self.instances {
            inst.updates.retain(|u| !gone.contains(&u.part));
        }
        for &g in &gone {
            // Keep indices stable; a dropped partition commits nothing.
            self.parts[g as usize].last_offset = -1;
        }
        self.outcomes.retain(|(part, _, _), _| !gone.contains(part));
        self.applied.retain(|e| !gone.contains(&e.part));
        self.dead_letters.retain(|d| {
            !revoked
                .iter()
                .any(|(t, p)| *t == d.topic && *p == d.partition)
        });
    }

    /// Offsets to commit once the batch is acknowledged: next offset per partition.
    pub fn commit_offsets(&self) -> impl Iterator<Item = (&Arc<str>, i32, i64)> {
        self.parts
            .iter()
            .filter(|p| p.last_offset >= 0)
            .map(|p| (&p.topic, p.partition, p.last_offset + 1))
    }

    /// The first offset of each partition in the batch.
    pub fn first_offsets(&self) -> impl Iterator<Item = ((Arc<str>, i32), i64)> + '_ {
        self.parts
            .iter()
            .filter(|p| p.last_offset >= 0)
            .map(|p| ((p.topic.clone(), p.partition), p.first_offset))
    }

    pub fn update_count(&self) -> usize {
        self.instances.iter().map(|i| i.updates.len()).sum()
    }

    /// The batch's final counts, given what Redis reported applying it: an
    /// event counts `applied` if Redis took at least one of its updates,
    /// `late` if the script found all of those it was sent late, and not
    /// at all if the fences showed every one of them applied already.
    pub fn settle(&self, report: &FlushReport) -> Settled {
        let mut counts: HashMap<(u16, Option<EventType>, Outcome), u64> = self.outcomes.clone();
        let mut applied_ts = Vec::with_capacity(self.applied.len());
        let fates = self.update_fates(report);
        for e in &self.applied {
            let outcome = match fates.as_ref().and_then(|f| f.get(&(e.part, e.offset))) {
                None => Some(Outcome::Applied),
                Some(f) if f.taken => Some(Outcome::Applied),
                Some(f) if f.late => Some(Outcome::Late),
                Some(_) => None,
            };
            if let Some(outcome) = outcome {
                *counts.entry((e.part, e.kind, outcome)).or_insert(0) += 1;
                if outcome == Outcome::Applied {
                    applied_ts.push(e.ts);
                }
            }
        }
        let mut outcomes: Vec<_> = counts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|((part, kind, outcome), n)| {
                (self.parts[part as usize].topic.clone(), kind, outcome, n)
            })
            .collect();
        outcomes.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
        Settled {
            outcomes,
            applied_ts,
        }
    }

    /// What became of each event's updates, per (partition, offset);
    /// `None` when Redis took every update sent and the fences skipped
    /// nothing (the common case, which needs no walk over the updates).
    fn update_fates(&self, report: &FlushReport) -> Option<HashMap<(u16, i64), Fate>> {
        if report.fenced.is_empty() && report.late_cutoffs.is_empty() {
            return None;
        }
        let mut fates: HashMap<(u16, i64), Fate> = HashMap::new();
        for (i, inst) in self.instances.iter().enumerate() {
            let i = i as u32;
            let fences = report.fenced.get(&i);
            let cutoffs = report.late_cutoffs.get(&i);
            for u in &inst.updates {
                let fate = fates.entry((u.part, u.offset)).or_default();
                if fences
                    .and_then(|f| f.get(&u.part))
                    .is_some_and(|&f| u.offset <= f)
                {
                    continue;
                }
                let is_window = inst.views[u.view as usize].window_ms.is_some();
                // A window's update is late when its bucket ended at or
                // before the cutoff; a period's only when the script found
                // the period closed (then it took none of its updates).
                let late = cutoffs
                    .and_then(|c| c.get(u.view as usize))
                    .is_some_and(|&c| {
                        if is_window {
                            u.bucket_end <= c
                        } else {
                            c == CLOSED_CUTOFF
                        }
                    });
                if late {
                    fate.late = true;
                } else {
                    fate.taken = true;
                }
            }
        }
        Some(fates)
    }
}

/// What Redis did with one event's updates.
#[derive(Debug, Default, Clone, Copy)]
struct Fate {
    /// At least one update was written (or left the board unchanged).
    taken: bool,
    /// At least one update was sent and found late.
    late: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Decoder;

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
        let json = serde_json::json!({
            "type": "gift", "event_id": format!("e{partition}-{offset}"), "ts": TS,
            "sender_id": "s", "receiver_id": "r", "gift_id": "g", "count": 1, "value": 1
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
        batch.count(
            batch.part_index[&(Arc::from("t"), 1)],
            None,
            Outcome::Invalid,
        );
        batch.drop_partitions(&[(Arc::from("t"), 1)]);
        let settled = batch.settle(&report(&set));
        // Only partition 0's three events: the next owner of partition 1
        // counts its four messages.
        assert_eq!(counts(&settled), vec![(Outcome::Applied, 3)]);
        assert_eq!(settled.applied_ts.len(), 3);
    }

    #[test]
    fn an_event_one_view_took_is_applied_though_its_window_updates_were_late() {
        let set = boards();
        let mut batch = Batch::default();
        gift(&mut batch, &set, 0, 0);
        let recent = batch.instances.iter().position(|i| i.board == 1).unwrap() as u32;
        let mut r = report(&set);
        // The script's cutoff passed the bucket on both views of `recent`,
        // but `fans` took its updates: the event is applied.
        let bucket_end = batch.instances[recent as usize].updates[0].bucket_end;
        r.late_cutoffs.insert(recent, vec![bucket_end]);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 1)]);
        // Every instance found it late: late, and no lag sample.
        for (i, inst) in batch.instances.iter().enumerate() {
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
        let recent = batch.instances.iter().position(|i| i.board == 1).unwrap();
        // Drop the instances other than `recent` to look at one board.
        let bucket_end = batch.instances[recent].updates[0].bucket_end;
        let mut r = report(&set);
        for (i, _) in batch.instances.iter().enumerate() {
            r.late_cutoffs.insert(i as u32, vec![bucket_end; 2]);
        }
        batch.instances.retain(|i| i.board == 1);
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
        for i in 0..batch.instances.len() as u32 {
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
        let days = batch.instances.iter().find(|i| i.board == 0).unwrap();
        let v = &days.views[0];
        assert_eq!(&*v.id, "day:2025-11-21");
        assert_eq!(v.expire_at, 0, "no expiry until the archiver sets it");
        assert_eq!(v.close_at, Some(close_of_ts_day()));
        assert_eq!(v.keep_until, close_of_ts_day() - GRACE + 35 * DAY);
        let due = super::super::due::wanted(
            &batch.instances,
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
        assert_eq!(batch.instances[0].updates.len(), 1);
        gift_at(&mut batch, &set, 0, 1, close_of_ts_day());
        let days = batch.instances.iter().find(|i| i.board == 0).unwrap();
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
        assert!(batch.instances.iter().all(|i| i.updates.is_empty()));
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
        let days = batch.instances.iter().position(|i| i.board == 0).unwrap() as u32;
        let mut r = report(&set);
        // An open period's -1 makes nothing late.
        r.late_cutoffs.insert(days, vec![-1]);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 2)]);
        // Closed on `days`, but `totals` took both events: applied.
        r.late_cutoffs.insert(days, vec![CLOSED_CUTOFF]);
        assert_eq!(counts(&batch.settle(&r)), vec![(Outcome::Applied, 2)]);
        // Without `totals`, every update of both events hit the closed
        // day: both are late, with no lag samples.
        batch.instances.retain(|i| i.board == 0);
        let r = FlushReport {
            late_cutoffs: HashMap::from([(0, vec![CLOSED_CUTOFF])]),
            ..report(&set)
        };
        let settled = batch.settle(&r);
        assert_eq!(counts(&settled), vec![(Outcome::Late, 2)]);
        assert!(settled.applied_ts.is_empty());
    }
}
