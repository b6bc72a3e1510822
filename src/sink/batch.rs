//! One batch in the making: the messages taken from Kafka since the last
//! flush, as raw per-view updates grouped by board instance, plus what the
//! batch must report once Redis has acknowledged it (offsets per partition,
//! outcome counts, event times for the lag histogram, dead letters).
//!
//! Updates are kept raw (with their partition and offset) rather than
//! pre-aggregated on arrival, because a fence conflict (src/sink/call.rs)
//! must be able to rebuild an instance's call without the events another
//! consumer already applied.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::resolve::Resolver;
use crate::deadletter::DeadLetter;
use crate::event::EventType;
use crate::rules::Update;
pub use crate::telemetry::Outcome;

use super::aggregate::Agg;

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
    /// Latest expiry wanted by any update (0 = never).
    pub expire_at: i64,
}

/// One event's contribution to one view.
#[derive(Debug, Clone)]
pub struct Raw {
    pub part: u16,
    pub offset: i64,
    pub view: u16,
    pub member: Arc<str>,
    pub agg: Agg,
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

/// Counts per (topic, event type, outcome) for `rankflow_events_total`.
pub type OutcomeCounts = HashMap<(Arc<str>, Option<EventType>, Outcome), u64>;

#[derive(Debug, Default)]
pub struct Batch {
    /// Messages taken (the `max_events` measure).
    pub messages: usize,
    /// When the first message arrived (the `max_delay_ms` measure).
    pub opened_at: Option<Instant>,
    pub parts: Vec<PartState>,
    part_index: HashMap<(Arc<str>, i32), u16>,
    pub instances: Vec<Instance>,
    /// Per board: scope value ("" when unscoped; scopes are never empty) → instance.
    instance_index: Vec<FastMap<Box<str>, u32>>,
    pub outcomes: OutcomeCounts,
    /// Event times of events with at least one update (lag histogram).
    pub applied_ts: Vec<i64>,
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

    pub fn count(&mut self, topic: &Arc<str>, kind: Option<EventType>, outcome: Outcome) {
        *self
            .outcomes
            .entry((topic.clone(), kind, outcome))
            .or_insert(0) += 1;
    }

    /// Adds one decoded event's board updates; returns its outcome (`Applied`
    /// meaning "will be applied when the batch is acknowledged").
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
        for u in updates {
            let board = &boards.boards[u.board];
            let inst = self.instance(boards, u.board, u.scope.as_deref());
            let member: Arc<str> = Arc::from(u.member.as_ref());
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
                        v as u16
                    }
                    None => {
                        instance.views.push(ConcreteView {
                            identity,
                            id: r.view_id,
                            window_ms: r.window_ms,
                            expire_at: r.expire_at,
                        });
                        (instance.views.len() - 1) as u16
                    }
                };
                instance.updates.push(Raw {
                    part,
                    offset,
                    view: v,
                    member: member.clone(),
                    agg: Agg::new(u.value, ts),
                    bucket_end: r.bucket_end.unwrap_or(0),
                });
            }
        }
        if any {
            self.applied_ts.push(ts);
            Outcome::Applied
        } else {
            Outcome::Late
        }
    }

    fn instance(&mut self, boards: &BoardSet, board: usize, scope: Option<&str>) -> u32 {
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
            tag: keys::instance_tag(&boards.boards[board].name, scope),
            views: Vec::new(),
            updates: Vec::new(),
        });
        by_scope.insert(scope.unwrap_or("").into(), i);
        i
    }

    /// Drops everything of the given partitions (they were revoked: their
    /// uncommitted messages will be read again by the next owner).
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
}
