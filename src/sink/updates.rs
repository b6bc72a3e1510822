//! A batch's board updates, as the sink writes them: raw per-view updates
//! grouped by board instance (board + scope value), each with the
//! partition and offset of its event, plus the members they name and the
//! fence field of every partition. What the engine must report once Redis
//! answered (offsets to commit, outcome counts, dead letters) is not here:
//! that is the engine's record of the batch.
//!
//! Updates are kept raw (with their partition and offset) rather than
//! pre-aggregated on arrival, because a fence conflict must be able to
//! rebuild an instance's call without the events another consumer already
//! applied ([`crate::sink::encode`] merges them per call).

use std::collections::HashMap;
use std::sync::Arc;

use crate::board::BoardSet;
use crate::board::resolve::Resolver;
use crate::moderation::Route;
use crate::rules::Update;

use super::aggregate::{Agg, FieldAggs, field_aggs};
use super::reply::CLOSED_CUTOFF;
use super::report::FlushReport;

/// Hash maps keyed by strings on the hot path: foldhash is several times
/// faster than the default SipHash, and the keys are not attacker-chosen
/// in a way that matters (a collision only costs time within one batch).
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A set of a batch's events, by (partition index, offset): looked up once
/// per update where events leave a batch, so hashed with foldhash too.
pub(crate) type EventSet = std::collections::HashSet<(u16, i64), foldhash::fast::RandomState>;

/// One concrete view of an instance touched by the batch.
#[derive(Debug, Clone)]
pub(crate) struct ConcreteView {
    /// (index of the view in the board, period start or 0 for windows).
    identity: (usize, i64),
    /// The view's id in key names (`day:2026-11-21`, `win:3h`).
    pub(crate) id: Arc<str>,
    /// Window length for windows, `None` for periods.
    pub(crate) window_ms: Option<i64>,
    /// Latest expiry wanted by any update (0 = none; always 0 for an
    /// archived period, whose expiry the archiver sets after the copy).
    pub(crate) expire_at: i64,
    /// Until when the view is meant to live (0 = forever): what the
    /// instance's fences must outlive, archived or not.
    pub(crate) keep_until: i64,
    /// For a period of an archived view: when it closes (`end + grace`).
    /// Such a view's call carries its `K:closed` marker, and the period is
    /// registered in the due set before it is applied.
    pub(crate) close_at: Option<i64>,
}

/// One event's contribution to one view.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    /// Index of the event's partition in [`Updates::fields`].
    pub(crate) part: u16,
    /// The event's offset: what the fences compare.
    pub(crate) offset: i64,
    /// Index of the view in its instance's [`Instance::views`].
    pub(crate) view: u16,
    /// Index into [`Updates::members`].
    pub(crate) member: u32,
    /// The update's value and event time.
    pub(crate) agg: Agg,
    /// A composite board's fields (boxed: plain boards, the common case,
    /// keep their updates small).
    pub(crate) fields: Option<Box<FieldAggs>>,
    /// Window bucket end; 0 for periods.
    pub(crate) bucket_end: i64,
}

/// A board instance (board + scope value) touched by the batch.
#[derive(Debug)]
pub(crate) struct Instance {
    /// Index of the board in [`BoardSet::boards`].
    pub(crate) board: usize,
    /// Hash tag content (`board` or `board:<escaped scope>`).
    pub(crate) tag: String,
    /// Few per instance (one per view, more only when a batch spans a
    /// period boundary), so found by a scan.
    pub(crate) views: Vec<ConcreteView>,
    /// Every update of the instance, in arrival order.
    pub(crate) updates: Vec<Raw>,
    /// A shadow board applied beside the live boards (docs/rebuilds.md):
    /// written like any instance, but not what the events' outcomes count.
    pub(crate) aside: bool,
}

/// No instance yet (in [`Updates`]'s `unscoped`).
const NO_INSTANCE: u32 = u32::MAX;

/// Where an event sits in the log, and when it happened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    /// Index of its partition in [`Updates::fields`].
    pub(crate) part: u16,
    /// Its offset in that partition.
    pub(crate) offset: i64,
    /// Its event time (ms).
    pub(crate) ts: i64,
}

/// What became of one event's updates when they were added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// At least one update is in the batch: applied if Redis takes one.
    Some,
    /// The rules gave the event no update (a filter, or no board for it).
    None,
    /// Every update's view was late already (left its window, closed, past
    /// its retention).
    Late,
}

/// The sink's side of one batch.
#[derive(Debug, Default)]
pub struct Updates {
    /// Per partition index: its fence field (`<topic>/<partition>`).
    pub(crate) fields: Vec<String>,
    /// Board instances in the order the batch first touched them.
    pub(crate) instances: Vec<Instance>,
    /// Every member named by an update of the batch, once: updates hold
    /// an index, so an event's updates to its ~6 views copy no string and
    /// the calls merge them by integer keys.
    pub(crate) members: Vec<Arc<str>>,
    member_index: FastMap<Arc<str>, u32>,
    /// Per board: scope value ("" when unscoped; scopes are never empty) → instance.
    instance_index: Vec<FastMap<Box<str>, u32>>,
    /// Per board: its unscoped instance, found without hashing ("" in
    /// `instance_index` too); [`NO_INSTANCE`] when the batch has none yet.
    unscoped: Vec<u32>,
}

impl Updates {
    /// An empty batch's updates with room for as many members and
    /// instances as `self` holds: consecutive batches look alike, and
    /// growing the member table from nothing rehashed it several times in
    /// every batch.
    pub(crate) fn sized_like(&self) -> Updates {
        Updates {
            fields: Vec::with_capacity(self.fields.len()),
            instances: Vec::with_capacity(self.instances.len()),
            members: Vec::with_capacity(self.members.len()),
            member_index: FastMap::with_capacity_and_hasher(self.members.len(), Default::default()),
            instance_index: Vec::new(),
            unscoped: Vec::new(),
        }
    }

    /// Names the next partition index's fence field; partitions are
    /// numbered in the order the batch meets them.
    pub(crate) fn add_partition(&mut self, field: String) -> u16 {
        self.fields.push(field);
        (self.fields.len() - 1) as u16
    }

    /// Adds one decoded event's board updates (`updates`, from the rules)
    /// at clock `now`.
    pub(crate) fn add(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        at: At,
        updates: &[Update<'_>],
        now: i64,
    ) -> Added {
        self.add_to(boards, resolver, at, (updates, false), now)
    }

    /// [`Updates::add`], for instances that are `aside` (shadow boards the
    /// live consumers apply beside their own) or not.
    pub(crate) fn add_to(
        &mut self,
        boards: &BoardSet,
        resolver: &mut Resolver,
        at: At,
        (updates, aside): (&[Update<'_>], bool),
        now: i64,
    ) -> Added {
        if updates.is_empty() {
            return Added::None;
        }
        let mut any = false;
        // Boards reading the same field name the same member: such updates
        // share its text (borrowed from the event), and then its index.
        let mut last = None;
        for u in updates {
            let board = &boards.boards[u.board];
            let inst = self.instance(boards, u.board, u.scope.as_deref(), aside);
            let member = self.intern_shared(&u.member, &mut last);
            for view in 0..board.views.len() {
                let r = resolver.resolve(boards, u.board, view, at.ts, now);
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
                    part: at.part,
                    offset: at.offset,
                    view: v,
                    member,
                    agg: Agg::new(u.value, at.ts),
                    fields: u.fields.as_ref().map(|f| Box::new(field_aggs(f, at.ts))),
                    bucket_end: r.bucket_end.unwrap_or(0),
                });
            }
        }
        if any { Added::Some } else { Added::Late }
    }

    /// [`Updates::intern`], but `last` (the previous text's address,
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

    /// The index of `member` in [`Updates::members`], added if new.
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

    fn instance(
        &mut self,
        boards: &BoardSet,
        board: usize,
        scope: Option<&str>,
        aside: bool,
    ) -> u32 {
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
            aside,
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

    /// Drops the updates of the given partition indices (revoked: the next
    /// owner reads them again). Indices stay as they are.
    pub(crate) fn drop_partitions(&mut self, gone: &[u16]) {
        for inst in &mut self.instances {
            inst.updates.retain(|u| !gone.contains(&u.part));
        }
    }

    /// The events with updates: (partition index, offset).
    pub(crate) fn events(&self) -> EventSet {
        self.instances
            .iter()
            .flat_map(|inst| inst.updates.iter().map(|u| (u.part, u.offset)))
            .collect()
    }

    /// Drops the updates of the events `gone` (partition index, offset):
    /// they were quarantined.
    pub(crate) fn drop_events(&mut self, gone: &EventSet) {
        for inst in &mut self.instances {
            inst.updates.retain(|u| !gone.contains(&(u.part, u.offset)));
        }
    }

    /// Drops the updates of the events `gone` from the instances that are
    /// not aside (the live boards').
    pub(crate) fn drop_live_events(&mut self, gone: &EventSet) {
        for inst in &mut self.instances {
            if !inst.aside {
                inst.updates.retain(|u| !gone.contains(&(u.part, u.offset)));
            }
        }
    }

    /// Drops the updates of `board`'s aside instances from partition
    /// `part` (a shadow the batch no longer applies there).
    pub(crate) fn drop_aside(&mut self, board: usize, part: u16) {
        for inst in &mut self.instances {
            if inst.aside && inst.board == board {
                inst.updates.retain(|u| u.part != part);
            }
        }
    }

    /// What became of each event's updates, per (partition, offset), given
    /// what Redis reported applying them; `None` when Redis took every
    /// update sent and the fences skipped nothing (the common case, which
    /// needs no walk over the updates). Only events with an update that
    /// was fenced, late, or routed away from its view (a hidden or erased
    /// member) are in it: one whose updates all went to their views is
    /// `Applied`, as if absent. So a batch with a hidden member builds
    /// entries for that member's events, not for every event.
    pub(crate) fn fates(&self, report: &FlushReport) -> Option<Fates> {
        if report.fenced.is_empty() && report.late_cutoffs.is_empty() && report.moderation.is_none()
        {
            return None;
        }
        let routes = report
            .moderation
            .as_ref()
            .and_then(|m| m.batch_routes(&self.members));
        let mut fates = Fates::default();
        // First the events that can settle as anything but `Applied`...
        self.walk_fates(report, routes.as_ref(), |u, fate| {
            if fate != Fated::Visible {
                fates.insert((u.part, u.offset), Fate::default());
            }
        });
        if fates.is_empty() {
            return None;
        }
        // ...then what became of each of their updates.
        self.walk_fates(report, routes.as_ref(), |u, fated| {
            if let Some(fate) = fates.get_mut(&(u.part, u.offset)) {
                match fated {
                    Fated::Fenced => {}
                    Fated::Erased => fate.erased = true,
                    Fated::Late => fate.late = true,
                    Fated::Hidden => {
                        fate.taken = true;
                        fate.hidden = true;
                    }
                    Fated::Visible => {
                        fate.taken = true;
                        fate.visible = true;
                    }
                }
            }
        });
        Some(fates)
    }

    /// Calls `each` with every update of the live boards and what became
    /// of it.
    fn walk_fates(
        &self,
        report: &FlushReport,
        routes: Option<&crate::moderation::BatchRoutes<'_>>,
        mut each: impl FnMut(&Raw, Fated),
    ) {
        for (i, inst) in self.instances.iter().enumerate() {
            // Outcomes are the live boards'.
            if inst.aside {
                continue;
            }
            let i = i as u32;
            let fences = report.fenced.get(&i);
            let cutoffs = report.late_cutoffs.get(&i);
            for u in &inst.updates {
                if fences
                    .and_then(|f| f.get(&u.part))
                    .is_some_and(|&f| u.offset <= f)
                {
                    each(u, Fated::Fenced);
                    continue;
                }
                let route = routes.map_or(Route::Visible, |r| r.route(inst.board, u.member));
                if route == Route::Erased {
                    each(u, Fated::Erased);
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
                let fated = match route {
                    _ if late => Fated::Late,
                    Route::Hidden => Fated::Hidden,
                    _ => Fated::Visible,
                };
                each(u, fated);
            }
        }
    }
}

/// What became of one update ([`Updates::fates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fated {
    /// The fences showed it applied already.
    Fenced,
    /// Left out: its member is erased.
    Erased,
    /// Sent and found late.
    Late,
    /// Taken, into the twin of its view (its member is hidden).
    Hidden,
    /// Taken, into its view.
    Visible,
}

/// Per (partition index, offset): what Redis did with that event's updates.
pub(crate) type Fates = FastMap<(u16, i64), Fate>;

/// What Redis did with one event's updates.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Fate {
    /// At least one update was written (or left the board unchanged).
    pub(crate) taken: bool,
    /// At least one update was sent and found late.
    pub(crate) late: bool,
    /// Of the updates taken, one went to a board's view...
    pub(crate) visible: bool,
    /// ...or to the twin of one (its member is hidden).
    pub(crate) hidden: bool,
    /// An update was left out: its member is erased.
    pub(crate) erased: bool,
}
