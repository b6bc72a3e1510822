//! Hiding, restoring and erasing a member (docs/moderation.md), for the
//! admin API and `rankflow member`. One action, in this order:
//!
//! 1. The fleet's moderation record (`<prefix>:moderation`) takes the new
//!    state, then its generation G is raised: a consumer that reads the
//!    record at G or later routes the member accordingly.
//! 2. The member's index entry takes the new state and answers the scoped
//!    instances the member was written to (see `crate::sink::members` for
//!    why a consumer registering a new instance meanwhile is seen by one
//!    side or the other).
//! 3. Per board instance, one call of the apply script's `move` mode moves
//!    the member between the views and their twins (or out of both), and
//!    stamps the instance with G: an apply call encoded before the
//!    consumer heard of the action is refused there and encoded again.
//! 4. With an archive, the member's archived rows are marked, unmarked or
//!    deleted (see `super::archived`).
//! 5. Unions of views cached by readers are left to expire
//!    (`[http] union_cache`), so none still shows the old state.
//! 6. The action is logged and announced (see [`super::audit`]).
//!
//! From before step 1 to after step 4 the member's keyed hash is in the
//! set of actions under way (`<prefix>:moderation:actions`): the
//! archiver copies no period meanwhile, since the moves shift members
//! between the views it reads.
//!
//! Every step can be repeated: a process killed in the middle leaves the
//! record saying what was asked, and the same request finishes the job.
//! One action per member at a time: a lock key (`union_cache` + 5 s)
//! beside its index entry; a second action meanwhile is refused (409)
//! rather than interleaved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::archive::connect::Target;
use crate::archive::members::ArchiveHolding;
use crate::board::BoardSet;
use crate::board::keys;
use crate::clock::SharedClock;
use crate::config::KafkaConfig;
use crate::moderation::{HiddenEntry, MemberHasher};
use crate::sink::members::Entry;
use crate::sink::moves::{self, MoveAction};
use crate::sink::store::{Store, StoreError, server_error};

use super::archived::ArchiveStep;
use super::audit::{Audit, AuditEntry, rfc3339};
use super::report::{ActionRequest, Holding, MemberAction, MemberError, MemberReport};
use super::{record, recover};

/// Longest member id an action takes (ids are short in every schema).
pub const MAX_MEMBER_BYTES: usize = 1024;

/// How long an action's lock on a member lives if its process dies, beyond
/// the wait for cached unions (`[http] union_cache`): long enough for the
/// moves (tens of milliseconds at a million members), short enough that
/// repeating an interrupted action is soon possible.
const LOCK_MARGIN_MS: u64 = 5_000;

/// How long an entry in the set of actions under way counts if its
/// process dies, beyond the member lock's life: the archive's part may
/// wait for a long copy to finish. Until then the archiver leaves periods
/// alone (or the action is repeated, which clears it).
const ACTION_LEASE_MARGIN_MS: u64 = 60_000;

/// Rounds of a move call whose window trimming ran out of budget.
const MAX_MOVE_ROUNDS: usize = 64;

/// Move calls per pipelined round trip.
const MOVES_PER_ROUND_TRIP: usize = 64;

/// What every move call of one action carries.
struct Move<'a> {
    action: MoveAction,
    member: &'a str,
    stamp: i64,
    now: i64,
}

/// Performs member actions for one configuration.
#[derive(Debug, Clone)]
pub struct Moderator {
    pub(super) store: Store,
    pub(super) boards: Arc<BoardSet>,
    hasher: MemberHasher,
    pub(super) clock: SharedClock,
    /// How long readers may keep a union's result (`[http] union_cache`).
    union_cache: Duration,
    pub(super) audit: Audit,
    /// The archive the actions also change (`[archive] url`).
    archive: Option<ArchiveStep>,
    /// Where a lost record is rebuilt from: `[kafka]` and `[admin]
    /// audit_topic`.
    recovery: Option<(KafkaConfig, String)>,
}

impl Moderator {
    /// A moderator over `store` for `boards`; `hasher` is keyed by
    /// `[admin] erase_key`.
    pub fn new(
        store: Store,
        boards: Arc<BoardSet>,
        hasher: MemberHasher,
        clock: SharedClock,
        union_cache_ms: i64,
        audit: Audit,
    ) -> Moderator {
        Moderator {
            store,
            boards,
            hasher,
            clock,
            union_cache: Duration::from_millis(union_cache_ms.max(0) as u64),
            audit,
            archive: None,
            recovery: None,
        }
    }

    /// An action that finds the moderation record missing rebuilds it
    /// from `topic` first (see `super::recover`).
    pub fn with_recovery(mut self, kafka: &KafkaConfig, topic: Option<&str>) -> Moderator {
        self.recovery = topic.map(|t| (kafka.clone(), t.to_string()));
        self
    }

    /// Actions also change the archive at `target` (`[archive] url`).
    pub fn with_archive(mut self, target: Option<Target>) -> Moderator {
        self.archive = target.map(ArchiveStep::new);
        self
    }

    fn lock_ms(&self) -> u64 {
        self.union_cache.as_millis() as u64 + LOCK_MARGIN_MS
    }

    /// Adds (`ZADD`) or removes (`ZREM`) the member's entry in the set of
    /// actions under way.
    async fn under_way(&self, hex: &str, on: bool) -> Result<(), MemberError> {
        let key = keys::actions_key(self.prefix());
        let cmd = match on {
            true => redis::cmd("ZADD")
                .arg(&key)
                .arg(self.clock.now_ms() + (self.lock_ms() + ACTION_LEASE_MARGIN_MS) as i64)
                .arg(hex)
                .clone(),
            false => redis::cmd("ZREM").arg(&key).arg(hex).clone(),
        };
        let _: i64 = self.store.query(&cmd).await?;
        Ok(())
    }

    fn prefix(&self) -> &str {
        &self.boards.key_prefix
    }

    fn check_member(member: &str) -> Result<(), MemberError> {
        if member.is_empty() || member.len() > MAX_MEMBER_BYTES {
            return Err(MemberError::BadRequest(format!(
                "a member id has 1 to {MAX_MEMBER_BYTES} bytes"
            )));
        }
        Ok(())
    }

    /// Board indices of `names` (every board for `None`).
    fn board_indices(&self, names: Option<&[String]>) -> Result<Vec<usize>, MemberError> {
        let Some(names) = names else {
            return Ok((0..self.boards.boards.len()).collect());
        };
        if names.is_empty() {
            return Err(MemberError::BadRequest(
                "\"boards\" is empty; leave it out to mean every board".to_string(),
            ));
        }
        let mut out = Vec::new();
        for n in names {
            match self.boards.boards.iter().position(|b| b.name == *n) {
                Some(i) if !out.contains(&i) => out.push(i),
                Some(_) => {}
                None => {
                    return Err(MemberError::BadRequest(format!("no board named {n:?}")));
                }
            }
        }
        Ok(out)
    }

    /// Hides, restores or erases a member; answers its state once done.
    pub async fn act(
        &self,
        action: MemberAction,
        req: &ActionRequest,
        actor: &str,
    ) -> Result<MemberReport, MemberError> {
        Self::check_member(&req.member)?;
        let chosen = self.board_indices(req.boards.as_deref())?;
        if action == MemberAction::Erase && !self.hasher.keyed() {
            return Err(MemberError::Conflict(
                "erasing needs [admin] erase_key (the key of the hashes that record an erasure instead of the id); see docs/moderation.md".to_string(),
            ));
        }
        if action == MemberAction::Erase && req.boards.is_some() {
            return Err(MemberError::BadRequest(
                "an erasure covers every board; leave \"boards\" out".to_string(),
            ));
        }
        if let Some((kafka, topic)) = &self.recovery {
            let now = self.clock.now_ms();
            recover::rebuild_if_lost(&self.store, self.prefix(), kafka, topic, &self.hasher, now)
                .await
                .map_err(|e| MemberError::Recover(e.to_string()))?;
        }
        let hex = self.hasher.hex(&req.member);
        let index = Entry::new(self.prefix(), &hex);
        let lock = keys::member_lock_key(self.prefix(), &hex);
        let token = format!("{}-{}", std::process::id(), self.clock.now_ms());
        let locked: Option<String> = self
            .store
            .query(
                redis::cmd("SET")
                    .arg(&lock)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.lock_ms()),
            )
            .await?;
        if locked.is_none() {
            return Err(MemberError::Conflict(
                "another action on this member is under way; try again when it is done".to_string(),
            ));
        }
        let started = Instant::now();
        let result = match self.under_way(&hex, true).await {
            Ok(()) => {
                self.act_locked(action, req, actor, &chosen, &hex, &index)
                    .await
            }
            Err(e) => Err(e),
        };
        // The lock goes whatever happened (it also expires on its own).
        let _: Result<i64, _> = self.store.query(redis::cmd("DEL").arg(&lock)).await;
        let (report, detail) = result?;
        let target = match action {
            MemberAction::Erase => format!("member-hash:{hex}"),
            _ => format!("member:{}", req.member),
        };
        let mut detail = detail;
        if let Some(obj) = detail.as_object_mut() {
            obj.insert(
                "took_ms".to_string(),
                serde_json::json!(started.elapsed().as_millis() as u64),
            );
        }
        self.audit
            .record(&AuditEntry {
                at: rfc3339(self.clock.now_ms()),
                actor: actor.to_string(),
                action: action.audit_name().to_string(),
                target,
                detail,
            })
            .await?;
        Ok(report)
    }

    /// What an erasure leaves behind in Redis besides the boards: the
    /// member's index entries, and its rate-check state (docs/checks.md) of
    /// every event type (keys named by its id; consumers keep none for an
    /// erased member from then on).
    async fn forget(
        &self,
        index: &Entry,
        registered: &[String],
        member: &str,
    ) -> Result<(), MemberError> {
        self.forget_instances(index, registered).await?;
        for kind in crate::event::EventType::ALL {
            let key = keys::rate_key(self.prefix(), kind.name(), member);
            let _: i64 = self.store.query(redis::cmd("DEL").arg(key)).await?;
        }
        Ok(())
    }

    async fn act_locked(
        &self,
        action: MemberAction,
        req: &ActionRequest,
        actor: &str,
        chosen: &[usize],
        hex: &str,
        index: &Entry,
    ) -> Result<(MemberReport, serde_json::Value), MemberError> {
        let member = req.member.as_str();
        let now = self.clock.now_ms();
        let (hidden, erased) = record::read(&self.store, self.prefix(), member, hex).await?;
        if erased && action != MemberAction::Erase {
            return Err(MemberError::Conflict(
                "this member was erased; its events change no board any more".to_string(),
            ));
        }
        let entry = self.hidden_after(action, req, actor, chosen, hidden.as_ref(), now);
        // 1. The record, then its generation.
        let change = record::Change::new(action, member, hex, entry.as_ref(), actor, now);
        let key_id = self.hasher.key_id();
        let stamp = record::write(&self.store, self.prefix(), &key_id, &change).await?;
        // 2. The member's index entry: the action under way, its state, and
        //    where it was written.
        let registered = self.instances_after(index, action, entry.as_ref()).await?;
        // 3. The moves, per board and instance.
        let all: Vec<usize> = (0..self.boards.boards.len()).collect();
        let (move_action, moved_boards) = match action {
            MemberAction::Hide => (MoveAction::Hide, chosen),
            MemberAction::Restore => (MoveAction::Restore, chosen),
            MemberAction::Erase => (MoveAction::Erase, &all[..]),
        };
        let instances = self.instances_of(moved_boards, &registered);
        let found = self
            .moves(&instances, move_action, member, stamp, now)
            .await?;
        if action == MemberAction::Erase {
            self.forget(index, &registered, member).await?;
        }
        // 4. The archive.
        let archived = self.archive_step(action, member, moved_boards).await?;
        self.under_way(hex, false).await?;
        // 5. Unions cached before the moves expire; then it is done.
        self.wait_for_unions(moved_boards).await?;
        let done = redis::cmd("HDEL")
            .arg(&index.key)
            .arg(index.pending_field())
            .clone();
        let _: i64 = self.store.query(&done).await?;
        let report = MemberReport {
            member: (action != MemberAction::Erase).then(|| member.to_string()),
            state: match (action, &entry) {
                (MemberAction::Erase, _) => "erased",
                (_, Some(_)) => "hidden",
                (_, None) => "visible",
            },
            hidden: entry,
            boards: match action {
                MemberAction::Erase => Vec::new(),
                _ => self.holdings(&instances, &found),
            },
            pending: None,
            archive: match action {
                MemberAction::Erase => None,
                _ => self.archive_holdings(member).await?,
            },
        };
        // `hidden` (the member's entry once done) and `at` let the record
        // be rebuilt from the audit topic (see `super::recover`).
        let detail = serde_json::json!({
            "boards": req.boards,
            "reason": req.reason,
            "hidden": report.hidden,
            "at": now,
            "instances": instances.len(),
            "archived_periods": archived,
            "generation": stamp,
        });
        Ok((report, detail))
    }

    /// The member's hidden entry once the action is done (`None`: visible
    /// or erased): a hide adds `chosen` to the boards it is hidden from, a
    /// restore takes them out. A hide names its actor; what a partial
    /// restore leaves keeps the hide's.
    fn hidden_after(
        &self,
        action: MemberAction,
        req: &ActionRequest,
        actor: &str,
        chosen: &[usize],
        hidden: Option<&HiddenEntry>,
        now: i64,
    ) -> Option<HiddenEntry> {
        let before: Vec<usize> = match hidden {
            None => Vec::new(),
            Some(h) => self.board_indices(h.boards.as_deref()).unwrap_or_default(),
        };
        let after: Vec<usize> = match action {
            MemberAction::Hide => {
                let mut b = before.clone();
                b.extend(chosen.iter().filter(|i| !before.contains(i)));
                b.sort_unstable();
                b
            }
            MemberAction::Restore => before
                .iter()
                .copied()
                .filter(|i| !chosen.contains(i))
                .collect(),
            MemberAction::Erase => Vec::new(),
        };
        if after.is_empty() {
            return None;
        }
        let names: Vec<String> = after
            .iter()
            .map(|&i| self.boards.boards[i].name.clone())
            .collect();
        let kept = hidden.filter(|_| action == MemberAction::Restore);
        Some(HiddenEntry {
            boards: (after.len() < self.boards.boards.len()).then_some(names),
            at: kept.map_or(now, |h| h.at),
            actor: kept.map_or_else(|| actor.to_string(), |h| h.actor.clone()),
            reason: req
                .reason
                .clone()
                .or_else(|| hidden.and_then(|h| h.reason.clone())),
        })
    }

    /// Waits until no union of `boards` built before the moves can still
    /// be served: for as long as the youngest one has to live (its board's
    /// marker, set by the reader with each union it builds); not at all when
    /// no union of them was read within `[http] union_cache`.
    async fn wait_for_unions(&self, boards: &[usize]) -> Result<(), MemberError> {
        let cmds: Vec<redis::Cmd> = boards
            .iter()
            .map(|&b| {
                redis::cmd("PTTL")
                    .arg(keys::unions_built_key(
                        self.prefix(),
                        &self.boards.boards[b].stored,
                    ))
                    .clone()
            })
            .collect();
        let groups: Vec<Vec<redis::Cmd>> = cmds.into_iter().map(|c| vec![c]).collect();
        let replies = self.store.ordered(&groups).await?;
        let longest = replies
            .iter()
            .filter_map(|v| match v {
                redis::Value::Int(ms) if *ms > 0 => Some(*ms as u64),
                _ => None,
            })
            .max();
        if let Some(ms) = longest {
            // Never longer than union_cache, whatever a marker says.
            let wait = std::time::Duration::from_millis(ms).min(self.union_cache);
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// Writes the action under way and the member's new state to its index
    /// entry, then reads the scoped instances it names (the reads start once
    /// the writes are acknowledged).
    async fn instances_after(
        &self,
        index: &Entry,
        action: MemberAction,
        entry: Option<&HiddenEntry>,
    ) -> Result<Vec<String>, MemberError> {
        let pending = redis::cmd("HSET")
            .arg(&index.key)
            .arg(index.pending_field())
            .arg(action.name())
            .clone();
        let state = record::state_command(index, action, entry);
        let replies = self.store.ordered(&[vec![pending, state]]).await?;
        if let Some(e) = replies.iter().find_map(server_error) {
            return Err(e.into());
        }
        Ok(index
            .fields(&self.store)
            .await?
            .into_iter()
            .filter_map(|(f, _)| index.instance_of(&f).map(str::to_string))
            .collect())
    }

    /// The instances of `boards` the member may be in: an unscoped board's
    /// one, a scoped board's as its index entry names them.
    fn instances_of(&self, boards: &[usize], registered: &[String]) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for &b in boards {
            let board = &self.boards.boards[b];
            if board.scope.is_none() {
                out.push((b, board.tag(None)));
                continue;
            }
            for tag in registered {
                if keys::parse_tag(tag).is_some_and(|(name, _)| name == board.stored) {
                    out.push((b, tag.clone()));
                }
            }
        }
        out
    }

    /// Sends the move calls of `instances`, again for those whose window
    /// trimming ran out of budget; answers, per instance, where the member
    /// was in each of its views before (see [`moves::parse_reply`]), with
    /// the views' ids.
    async fn moves(
        &self,
        instances: &[(usize, String)],
        action: MoveAction,
        member: &str,
        stamp: i64,
        now: i64,
    ) -> Result<Vec<Vec<(String, u8)>>, MemberError> {
        let views: Vec<Vec<(String, Option<i64>)>> = instances
            .iter()
            .map(|(b, _)| self.boards.boards[*b].live_views(now, self.boards.future_skew_ms))
            .collect();
        let call = Move {
            action,
            member,
            stamp,
            now,
        };
        let mut found: Vec<Option<Vec<u8>>> = vec![None; instances.len()];
        let mut pending: Vec<usize> = (0..instances.len()).collect();
        for _ in 0..MAX_MOVE_ROUNDS {
            if pending.is_empty() {
                break;
            }
            let mut again = Vec::new();
            for chunk in pending.chunks(MOVES_PER_ROUND_TRIP) {
                let Some(replies) = self.send_moves(chunk, instances, &views, &call).await? else {
                    // The scripts were loaded again: the next round uses them.
                    again.extend_from_slice(chunk);
                    continue;
                };
                for (&i, (more, held)) in chunk.iter().zip(replies) {
                    // What the first round found is where the member was.
                    found[i].get_or_insert(held);
                    if more {
                        again.push(i);
                    }
                }
            }
            pending = again;
        }
        if !pending.is_empty() {
            return Err(StoreError::Protocol(format!(
                "{} instances were still trimming their windows after {MAX_MOVE_ROUNDS} rounds",
                pending.len()
            ))
            .into());
        }
        Ok(found
            .into_iter()
            .zip(views)
            .map(|(held, views)| {
                views
                    .into_iter()
                    .map(|(id, _)| id)
                    .zip(held.unwrap_or_default())
                    .collect()
            })
            .collect())
    }

    /// One pipelined round trip of move calls, for the instances `chunk`
    /// indexes; `None` when Redis had lost the scripts (loaded again now).
    async fn send_moves(
        &self,
        chunk: &[usize],
        instances: &[(usize, String)],
        views: &[Vec<(String, Option<i64>)>],
        call: &Move<'_>,
    ) -> Result<Option<Vec<(bool, Vec<u8>)>>, MemberError> {
        let scripts = self.store.scripts();
        let cmds: Vec<redis::Cmd> = chunk
            .iter()
            .map(|&i| {
                let (b, tag) = &instances[i];
                moves::command(
                    &scripts.apply,
                    self.prefix(),
                    &self.boards.boards[*b],
                    tag,
                    &views[i],
                    call.action,
                    call.member,
                    call.stamp,
                    call.now,
                )
            })
            .collect();
        let replies = match self.store.pipeline(&cmds, scripts.epoch).await {
            Err(StoreError::LostState) => return Ok(None),
            r => r?,
        };
        if let Some(e) = replies.iter().find_map(server_error) {
            return Err(e.into());
        }
        replies
            .iter()
            .map(|reply| {
                moves::parse_reply(reply).ok_or_else(|| {
                    StoreError::Protocol(format!("move call returned {reply:?}")).into()
                })
            })
            .collect::<Result<Vec<_>, MemberError>>()
            .map(Some)
    }

    /// Per board, the views and scopes `found` shows holding the member.
    fn holdings(&self, instances: &[(usize, String)], found: &[Vec<(String, u8)>]) -> Vec<Holding> {
        let mut by_board: BTreeMap<usize, Holding> = BTreeMap::new();
        for ((b, tag), views) in instances.iter().zip(found) {
            if views.iter().all(|(_, held)| *held == 0) {
                continue;
            }
            let h = by_board.entry(*b).or_insert_with(|| Holding {
                board: self.boards.boards[*b].name.clone(),
                views: Vec::new(),
                hidden_views: Vec::new(),
                scopes: Vec::new(),
            });
            if let Some((_, Some(scope))) = keys::parse_tag(tag) {
                h.scopes.push(scope);
            }
            for (id, held) in views {
                if held & 1 != 0 && !h.views.contains(id) {
                    h.views.push(id.clone());
                }
                if held & 2 != 0 && !h.hidden_views.contains(id) {
                    h.hidden_views.push(id.clone());
                }
            }
        }
        by_board
            .into_values()
            .map(|mut h| {
                h.scopes.sort();
                h
            })
            .collect()
    }

    /// A member's state and where it is held.
    pub async fn show(&self, member: &str) -> Result<MemberReport, MemberError> {
        Self::check_member(member)?;
        let hex = self.hasher.hex(member);
        let (hidden, erased) = record::read(&self.store, self.prefix(), member, &hex).await?;
        let index = Entry::new(self.prefix(), &hex);
        let fields = index.fields(&self.store).await?;
        let pending_field = index.pending_field();
        let pending = fields
            .iter()
            .find(|(f, _)| *f == pending_field)
            .map(|(_, v)| v.clone());
        if erased {
            return Ok(MemberReport {
                member: Some(member.to_string()),
                state: "erased",
                hidden: None,
                boards: Vec::new(),
                pending,
                archive: None,
            });
        }
        let registered: Vec<String> = fields
            .iter()
            .filter_map(|(f, _)| index.instance_of(f).map(str::to_string))
            .collect();
        let all: Vec<usize> = (0..self.boards.boards.len()).collect();
        let instances = self.instances_of(&all, &registered);
        let found = self
            .moves(&instances, MoveAction::Show, member, 0, self.clock.now_ms())
            .await?;
        Ok(MemberReport {
            member: Some(member.to_string()),
            state: if hidden.is_some() {
                "hidden"
            } else {
                "visible"
            },
            hidden,
            boards: self.holdings(&instances, &found),
            pending,
            archive: self.archive_holdings(member).await?,
        })
    }

    /// After an erasure's moves the index keeps the member's state alone: no
    /// instance names the member any more.
    async fn forget_instances(
        &self,
        index: &Entry,
        registered: &[String],
    ) -> Result<(), MemberError> {
        if registered.is_empty() {
            return Ok(());
        }
        let mut hdel = redis::cmd("HDEL");
        hdel.arg(&index.key);
        for tag in registered {
            hdel.arg(index.instance_field(tag));
        }
        let _: i64 = self.store.query(&hdel).await?;
        Ok(())
    }

    /// Step 4: with an archive, `action` on `member`'s archived rows of
    /// `boards`; answers how many archived periods changed.
    async fn archive_step(
        &self,
        action: MemberAction,
        member: &str,
        boards: &[usize],
    ) -> Result<Option<u64>, MemberError> {
        let Some(step) = &self.archive else {
            return Ok(None);
        };
        let names: Vec<String> = boards
            .iter()
            .map(|&i| self.boards.boards[i].name.clone())
            .collect();
        Ok(Some(step.apply(action, member, &names).await?))
    }

    /// With an archive, its periods holding `member`, per board.
    async fn archive_holdings(
        &self,
        member: &str,
    ) -> Result<Option<BTreeMap<String, ArchiveHolding>>, MemberError> {
        match &self.archive {
            Some(step) => Ok(Some(step.holdings(member).await?)),
            None => Ok(None),
        }
    }
}
