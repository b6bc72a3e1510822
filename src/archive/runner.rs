//! The archiver: every `[archive] interval_ms` (and once for `rankflow
//! archive`) it measures the backlog, lists what is due, and takes each due
//! period through the six steps of docs/history.md ("The steps"): close
//! (marker, no expiry), skip if empty, copy, announce, restore the expiry,
//! remove the item.
//! Every step is idempotent, so a crash anywhere is finished by the next
//! pass of any instance; the period's PostgreSQL advisory lock makes sure
//! only one of them copies it at a time (docs/history.md, "How archiving
//! works").
//!
//! PostgreSQL may be down for hours: the archiver keeps closing periods
//! (Redis only), keeps their keys, reports the backlog, and reconnects with
//! capped backoff. Shutdown drops a copy in flight, which PostgreSQL rolls
//! back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::model::ViewSpec;
use crate::board::period::parse_period_id;
use crate::board::serving::ServingMap;
use crate::clock::SharedClock;
use crate::config::ArchiveConfig;
use crate::sink::store::Store;
use crate::telemetry::events::{ArchiveBacklog, ArchiveFailed, PeriodArchived};

use super::ArchiveError;
use super::announce::{Announced, Announcer};
use super::connect::Target;
use super::copy::{Archive, Copied, Copy};
use super::due::{self, DueItem, DuePeriod};
use super::schema;
use super::standings::{self, Frozen};

/// Due items taken per pass; the rest wait for the next tick.
const DUE_PER_PASS: usize = 100;

/// How far a shadow's due period is moved on while its backfill runs.
const BACKFILL_WAIT_MS: i64 = 60_000;
/// Longest time between two refreshes of the backlog gauges.
const GAUGE_REFRESH: Duration = Duration::from_secs(10);
/// Longest wait between attempts while PostgreSQL is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How one period fared in a pass.
#[derive(Debug)]
pub enum Outcome {
    /// Copied now, with this many members.
    Archived {
        /// Rows written, one per member.
        members: u64,
        /// From the connection being ready to the copy's commit
        /// (`rankflow_archive_copy_seconds`, docs/metrics.md).
        took: Duration,
    },
    /// A complete copy existed (an earlier pass stopped after it); the
    /// remaining steps were finished.
    AlreadyArchived,
    /// The period had no events: nothing to copy.
    Empty,
    /// Another archiver holds the period's lock.
    Busy,
    /// A step failed; the period stays due and a later pass tries it again.
    Failed(ArchiveError),
}

/// One line of a pass's report.
#[derive(Debug)]
pub struct Report {
    /// `board/scope/view/period`, or the due item when it cannot be resolved.
    pub period: String,
    pub(crate) board: Option<String>,
    /// How the period fared.
    pub outcome: Outcome,
}

/// The archiver of one instance (or of one `rankflow archive` run).
pub struct Archiver {
    store: Store,
    boards: Arc<BoardSet>,
    config: ArchiveConfig,
    announcer: Option<Announcer>,
    clock: SharedClock,
    /// Connected and migrated; `None` until then and after a lost connection.
    archive: Option<Archive>,
    /// How to connect (`[archive] url` and `ca_file`, read at the first
    /// connection and kept).
    target: Option<Target>,
    /// Why connecting failed in this pass: the other periods of the pass
    /// fail at once with it instead of each waiting for a connect timeout.
    offline: Option<String>,
}

impl Archiver {
    /// An archiver of `boards` that reads closed periods from `store`,
    /// copies them to `config.url` and, with an `announcer`, announces
    /// them on `archive.closed_topic`. It does not connect to PostgreSQL
    /// here: [`Archiver::connect`] does, when a pass needs it.
    pub fn new(
        store: Store,
        boards: Arc<BoardSet>,
        config: ArchiveConfig,
        announcer: Option<Announcer>,
        clock: SharedClock,
    ) -> Archiver {
        Archiver {
            store,
            boards,
            config,
            announcer,
            clock,
            archive: None,
            target: None,
            offline: None,
        }
    }

    fn prefix(&self) -> &str {
        &self.boards.key_prefix
    }

    /// Connects and migrates the schema, unless already done.
    pub async fn connect(&mut self) -> Result<(), ArchiveError> {
        if self.archive.as_ref().is_some_and(|a| !a.is_closed()) {
            return Ok(());
        }
        self.archive = None;
        if let Some(why) = &self.offline {
            return Err(ArchiveError::Offline(why.clone()));
        }
        let target = match self.target.take() {
            Some(t) => t,
            None => Target::from_config(&self.config)?
                .ok_or_else(|| ArchiveError::Url("not set".into()))?,
        };
        let connected = async {
            let mut archive = Archive::connect_to(&target).await?;
            schema::migrate(archive.client()).await?;
            Ok::<_, ArchiveError>(archive)
        };
        let result = connected.await;
        let sslmode = target.ssl_mode().name();
        self.target = Some(target);
        let mut archive = match result {
            Ok(a) => a,
            Err(e) => {
                self.offline = Some(e.to_string());
                return Err(e);
            }
        };
        let tls = archive.uses_tls().await.ok();
        tracing::info!(
            url = %self.config.url_redacted().unwrap_or_default(),
            sslmode,
            tls,
            version = schema::latest(),
            "Connected to the archive database; its schema is current."
        );
        self.archive = Some(archive);
        Ok(())
    }

    /// Measures the backlog and reports it (gauges and log).
    /// Makes the due set's close times follow the configured grace (once
    /// after it changed; see [`due::sync_grace`]) and says so in the log.
    async fn sync_grace(&self) -> Result<(), ArchiveError> {
        let grace = self.config.grace.ms();
        let rescored = due::sync_grace(&self.store, &self.boards, self.prefix(), grace).await?;
        if rescored > 0 {
            tracing::info!(
                periods = rescored,
                grace_ms = grace,
                "The archive grace differs from the one the due periods were registered with; their close times now follow the configured grace."
            );
        }
        Ok(())
    }

    pub(crate) async fn measure(&self) -> Result<due::Backlog, ArchiveError> {
        let now = self.clock.now_ms();
        let backlog = due::backlog(&self.store, self.prefix(), now).await?;
        ArchiveBacklog {
            pending: backlog.pending,
            oldest_seconds: backlog.oldest_age_secs(now),
        }
        .emit();
        Ok(backlog)
    }

    /// One pass over what is due (only `board`'s items when given). `Err`
    /// when the due set cannot be read; a period that fails is reported in
    /// its line and stays due.
    pub async fn pass(&mut self, board: Option<&str>) -> Result<Vec<Report>, ArchiveError> {
        self.sync_grace().await?;
        self.measure().await?;
        let now = self.clock.now_ms();
        let items = due::list_due(&self.store, self.prefix(), now, DUE_PER_PASS).await?;
        let mut reports = Vec::with_capacity(items.len());
        let mut backfilling = HashMap::new();
        let serving = due::serving(&self.store, &self.boards).await?;
        for item in items {
            let resolved =
                due::resolve(&self.boards, self.prefix(), &item).map(|p| self.served(p, &serving));
            let report = match resolved {
                Ok(p) if board.is_some_and(|b| b != p.key.board) => continue,
                Ok(p) if self.backfilling(&p.key.board, &mut backfilling).await? => {
                    // A shadow's period may still take replayed events:
                    // archived once its backfill is done (docs/rebuilds.md).
                    due::postpone(&self.store, self.prefix(), &p, now + BACKFILL_WAIT_MS).await?;
                    continue;
                }
                Ok(p) if now < p.close_ms => {
                    // Listed by a close time a shorter grace gave it (a
                    // consumer still on the old configuration): it closes
                    // at the configured grace, not before.
                    due::reschedule(&self.store, self.prefix(), &p).await?;
                    continue;
                }
                Ok(p) => Report {
                    period: p.key.path(),
                    board: Some(p.key.board.clone()),
                    outcome: self.process(&p, false).await,
                },
                Err(e) => Report {
                    period: item.member.clone(),
                    board: None,
                    outcome: Outcome::Failed(e),
                },
            };
            reports.push(report);
        }
        Ok(reports)
    }

    /// `p`, or the same period of the shadow promoted in place of its
    /// board if the period ended after the promotion (what its readers
    /// were served: docs/rebuilds.md).
    fn served(&self, p: DuePeriod, serving: &ServingMap) -> DuePeriod {
        let shadow = serving
            .get(&p.key.board)
            .filter(|s| p.end_ms > s.since)
            .and_then(|s| self.boards.get(&s.board));
        match shadow {
            Some(shadow) => due::served_by(p, self.prefix(), shadow),
            None => p,
        }
    }

    /// Whether `board` is a shadow whose backfill is not done (asked once
    /// per board and pass).
    async fn backfilling(
        &self,
        board: &str,
        seen: &mut HashMap<String, bool>,
    ) -> Result<bool, ArchiveError> {
        if let Some(&b) = seen.get(board) {
            return Ok(b);
        }
        let shadow = self.boards.get(board).is_some_and(|b| b.shadow.is_some());
        let waits = shadow
            && !crate::backfill::progress::is_done(&self.store, self.prefix(), board)
                .await
                .map_err(ArchiveError::redis)?;
        seen.insert(board.to_string(), waits);
        Ok(waits)
    }

    /// Takes one period through the steps; never fails as a whole: a
    /// failure is the outcome, and the period stays due.
    pub async fn process(&mut self, p: &DuePeriod, replace: bool) -> Outcome {
        match self.steps(p, replace).await {
            Ok(outcome) => outcome,
            Err(e) => {
                if matches!(&e, ArchiveError::Postgres(pg) if pg.code().is_none()) {
                    // The connection may be gone; make a new one next time.
                    self.archive = None;
                }
                Outcome::Failed(e)
            }
        }
    }

    async fn steps(&mut self, p: &DuePeriod, replace: bool) -> Result<Outcome, ArchiveError> {
        // 0. no member action under way (its moves would shift the rows).
        let now = self.clock.now_ms();
        let Some(generation) = due::actions_settled(&self.store, self.prefix(), now).await? else {
            tracing::info!(period = %p.key.path(), "A member action is under way; the period is archived on a later pass.");
            return Ok(Outcome::Busy);
        };
        // 1. close: the marker stops every later update; no expiry meanwhile.
        let members = due::close(&self.store, p).await?;
        // 2. a period without events has nothing to copy.
        if members == 0 {
            self.finish(p).await?;
            return Ok(Outcome::Empty);
        }
        // 3. copy, in one transaction under the period's lock.
        self.connect().await?;
        let started = Instant::now();
        let frozen = Frozen {
            view_key: p.view_key.clone(),
            twin_key: p.twin_key.clone(),
            order: p.order,
            tie_key: p.tie_key,
            layout: p.layout.clone(),
            members,
            chunk: self.config.chunk.get(),
        };
        let rows = standings::chunks(self.store.clone(), frozen);
        let what = Copy {
            key: &p.key,
            start_ms: p.start_ms,
            end_ms: p.end_ms,
            replace,
        };
        // 3a. ... committed only if no member action crossed it.
        let (store, prefix, clock) = (
            self.store.clone(),
            self.prefix().to_string(),
            self.clock.clone(),
        );
        let settled =
            async move { due::still_settled(&store, &prefix, clock.now_ms(), generation).await };
        let archive = self
            .archive
            .as_mut()
            .ok_or_else(|| ArchiveError::Offline("the connection was lost".into()))?;
        let names = p.field_names();
        let copied = match archive
            .copy_checked(what, names.as_deref(), rows, settled)
            .await
        {
            Ok(copied) => copied,
            // Moves shift members between K and its twin: a copy that read
            // across an action may find the counts off. Not a fault.
            Err(ArchiveError::Source(_)) if self.crossed(generation).await => {
                tracing::info!(period = %p.key.path(), "A member action crossed the copy; the period is archived on a later pass.");
                return Ok(Outcome::Busy);
            }
            Err(e) => return Err(e),
        };
        let outcome = match copied {
            Copied::Busy => return Ok(Outcome::Busy),
            Copied::AlreadyArchived => Outcome::AlreadyArchived,
            Copied::Done { members } => Outcome::Archived {
                members,
                took: started.elapsed(),
            },
        };
        // 4. announce, at least once, under the same lock.
        if let Some(announcer) = &self.announcer
            && announcer.announce(archive, &p.key).await? == Announced::Busy
        {
            return Ok(Outcome::Busy);
        }
        // 5. and 6.
        self.finish(p).await?;
        Ok(outcome)
    }

    /// Whether a member action ran or runs since the record was at
    /// `generation` (step 0).
    async fn crossed(&self, generation: i64) -> bool {
        let now = self.clock.now_ms();
        let settled = due::still_settled(&self.store, self.prefix(), now, generation).await;
        !matches!(settled, Ok(true))
    }

    /// Steps 5 and 6: the keys expire at end + retention again, and the
    /// item leaves the due set.
    async fn finish(&self, p: &DuePeriod) -> Result<(), ArchiveError> {
        due::restore_expiry(&self.store, p).await?;
        due::remove(&self.store, self.prefix(), &p.member).await
    }

    /// `rankflow archive --period`: copies `period` of `board` again from
    /// Redis (replacing the archived copy), for `scope`, or for every scope
    /// found in the due set and the archive when none is given.
    pub async fn recopy(
        &mut self,
        board: &str,
        period: &str,
        scope: Option<&str>,
    ) -> Result<Vec<Report>, ArchiveError> {
        let targets = self.recopy_targets(board, period, scope).await?;
        let now = self.clock.now_ms();
        let mut reports = Vec::new();
        for p in targets {
            let outcome = if now < p.close_ms {
                Outcome::Failed(ArchiveError::Due {
                    member: p.member.clone(),
                    reason: "the period has not closed yet".into(),
                })
            } else if !self.exists(&p).await? {
                Outcome::Failed(ArchiveError::Due {
                    member: p.member.clone(),
                    reason: "its Redis keys are gone (expired after retention); the archived copy stays as it is".into(),
                })
            } else {
                self.process(&p, true).await
            };
            reports.push(Report {
                period: p.key.path(),
                board: Some(p.key.board.clone()),
                outcome,
            });
        }
        Ok(reports)
    }

    async fn exists(&self, p: &DuePeriod) -> Result<bool, ArchiveError> {
        let n: u64 = self
            .store
            .query(redis::cmd("ZCARD").arg(&p.view_key))
            .await
            .map_err(ArchiveError::redis)?;
        Ok(n > 0)
    }

    /// The periods `recopy` works on, resolved like due items.
    async fn recopy_targets(
        &mut self,
        board_name: &str,
        period: &str,
        scope: Option<&str>,
    ) -> Result<Vec<DuePeriod>, ArchiveError> {
        let bad = |reason: String| ArchiveError::Due {
            member: format!("{board_name} {period}"),
            reason,
        };
        let board = self
            .boards
            .get(board_name)
            .ok_or_else(|| bad(format!("no board named {board_name:?}")))?;
        let (kind, grace, end_ms) = board
            .views
            .iter()
            .find_map(|v| match v {
                ViewSpec::Period {
                    kind,
                    close_after: Some(grace),
                    ..
                } => parse_period_id(*kind, period, board.tz)
                    .ok()
                    .map(|p| (*kind, *grace, p.end_ms.unwrap_or(i64::MAX))),
                _ => None,
            })
            .ok_or_else(|| bad("not a period of any archived view of the board".into()))?;
        let view_id = format!("{}:{period}", kind.name());
        let tags: Vec<String> = match (scope, board.scope.is_some()) {
            (Some(s), _) => vec![board.tag(Some(s))],
            (None, false) => vec![board.tag(None)],
            (None, true) => {
                let stored = (board.stored.clone(), board.board_slot);
                self.known_scopes(board_name, stored, kind.name(), period, &view_id)
                    .await?
            }
        };
        let prefix = self.prefix().to_string();
        tags.iter()
            .map(|tag| {
                let item = DueItem {
                    member: keys::due_member(tag, &view_id),
                    close_ms: end_ms.saturating_add(grace),
                };
                due::resolve(&self.boards, &prefix, &item)
            })
            .collect()
    }

    /// Tags of the scopes of a period: in the due set, and in the archive.
    /// `board` is the board's name (the archive's), `stored` the name in
    /// its keys and its `scope_slot = "board"`.
    async fn known_scopes(
        &mut self,
        board: &str,
        (stored, board_slot): (String, bool),
        view: &str,
        period: &str,
        view_id: &str,
    ) -> Result<Vec<String>, ArchiveError> {
        let mut tags: Vec<String> = due::list_all(&self.store, self.prefix())
            .await?
            .into_iter()
            .filter_map(|item| {
                let (tag, id) = keys::parse_due_member(&item.member)?;
                let (b, _) = keys::parse_tag(tag)?;
                (b == stored && id == view_id).then(|| tag.to_string())
            })
            .collect();
        self.connect().await?;
        if let Some(archive) = self.archive.as_mut() {
            let rows = archive
                .client()
                .query(
                    "SELECT scope FROM rankflow_archived_periods
                      WHERE board = $1 AND view = $2 AND period = $3",
                    &[&board, &view, &period],
                )
                .await?;
            for row in rows {
                let scope: String = row.try_get(0)?;
                tags.push(keys::instance_tag_in(&stored, Some(&scope), board_slot));
            }
        }
        tags.sort();
        tags.dedup();
        Ok(tags)
    }

    /// The background loop of `rankflow run`: a pass every `interval_ms`
    /// until `shutdown`, backing off (capped) while passes fail.
    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let interval = self.config.interval_ms.duration();
        let mut delay = Duration::ZERO;
        let mut failures = 0u32;
        loop {
            if !self.wait(delay, &mut shutdown).await {
                break;
            }
            let healthy = tokio::select! {
                ok = self.tick() => ok,
                // A copy in flight is dropped: PostgreSQL rolls it back.
                _ = shutdown.wait_for(|s| *s) => break,
            };
            failures = if healthy {
                0
            } else {
                failures.saturating_add(1)
            };
            delay = backoff(interval, failures);
        }
        tracing::info!("The archiver stopped.");
    }

    /// Waits `delay`, refreshing the backlog gauges at least every
    /// [`GAUGE_REFRESH`] (the recorder drops gauges left alone for 30 s, and
    /// the backlog alert must not flap during a long backoff); `false` on
    /// shutdown.
    async fn wait(&self, delay: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
        let until = tokio::time::Instant::now() + delay;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            tokio::select! {
                _ = tokio::time::sleep(left.min(GAUGE_REFRESH)) => {}
                _ = shutdown.wait_for(|s| *s) => return false,
            }
            if left > GAUGE_REFRESH
                && let Err(e) = self.measure().await
            {
                tracing::debug!(error = %e, "Could not measure the archive backlog.");
            }
        }
    }

    /// One background pass; whether it went without failures.
    async fn tick(&mut self) -> bool {
        let interval = self.config.interval_ms.duration();
        self.offline = None;
        if let Err(e) = self.connect().await {
            // Periods still close (Redis only) while the database is away.
            ArchiveFailed {
                kind: e.kind(),
                period: "(connecting)",
                error: &e,
                retry_in: interval,
            }
            .emit();
        }
        match self.pass(None).await {
            Ok(reports) => {
                log_reports(&reports, interval);
                self.archive.is_some()
                    && !reports
                        .iter()
                        .any(|r| matches!(r.outcome, Outcome::Failed(_)))
            }
            Err(e) => {
                ArchiveFailed {
                    kind: e.kind(),
                    period: "(due set)",
                    error: &e,
                    retry_in: interval,
                }
                .emit();
                false
            }
        }
    }
}

/// The wait before the next pass: `interval` while passes succeed, then
/// doubling per failed pass up to [`MAX_BACKOFF`] (or `interval` if longer).
pub(crate) fn backoff(interval: Duration, failures: u32) -> Duration {
    let doubled = interval.saturating_mul(1u32 << failures.min(16));
    doubled.min(MAX_BACKOFF.max(interval))
}

/// Emits each report's metrics and log line.
pub(crate) fn log_reports(reports: &[Report], retry_in: Duration) {
    for r in reports {
        match &r.outcome {
            Outcome::Archived { members, took } => PeriodArchived {
                board: r.board.as_deref().unwrap_or_default(),
                period: &r.period,
                members: *members,
                took: *took,
            }
            .emit(),
            Outcome::Failed(e) => ArchiveFailed {
                kind: e.kind(),
                period: &r.period,
                error: e,
                retry_in,
            }
            .emit(),
            Outcome::AlreadyArchived => tracing::info!(
                period = %r.period,
                "Finished a period whose copy an earlier pass had completed."
            ),
            Outcome::Empty => tracing::debug!(
                period = %r.period,
                "A closed period had no events; nothing to archive."
            ),
            Outcome::Busy => tracing::debug!(
                period = %r.period,
                "Another archiver holds this period; leaving it to them."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let i = Duration::from_millis(500);
        assert_eq!(backoff(i, 0), i);
        assert_eq!(backoff(i, 1), Duration::from_secs(1));
        assert_eq!(backoff(i, 3), Duration::from_secs(4));
        assert_eq!(backoff(i, 10), MAX_BACKOFF);
        assert_eq!(backoff(i, u32::MAX), MAX_BACKOFF);
        // An interval beyond the cap is kept as it is.
        let long = Duration::from_secs(60);
        assert_eq!(backoff(long, 5), long);
    }
}
