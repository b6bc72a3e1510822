//! Wiring and lifecycle of `rankflow run`: check everything that can be
//! checked without a server ([`preflight`], shared with `rankflow check`),
//! open the HTTP listener (so `/healthz` can say what is missing), connect
//! to Redis and Kafka (retrying only while they are unreachable, one log
//! line per attempt; a refused password or permission ends the start-up),
//! run the consumer loop and the window trimmer, and shut down in order.
//!
//! [`run`] takes the listener, the clock and the shutdown signal as
//! arguments, so tests start a whole consumer in-process on `127.0.0.1:0`
//! with a clock they control.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::admin::{Audit, Moderator};
use crate::api::{self, ApiState};
use crate::archive::ArchiveError;
use crate::archive::announce::{self, Announcer};
use crate::archive::connect::Target;
use crate::archive::read::ArchiveReader;
use crate::archive::runner::Archiver;
use crate::backfill;
use crate::backfill::start::Replay;
use crate::backfill::verdicts::Verdicts;
use crate::board::BoardSet;
use crate::checks::CheckSet;
use crate::clock::SharedClock;
use crate::config::{Config, ConfigError, KafkaConfig};
use crate::deadletter::{DeadLetterError, DeadLetters};
use crate::engine::cover::Covers;
use crate::engine::{Engine, Flusher, Role};
use crate::event::{Decoder, SchemaBuildError};
use crate::health::Health;
use crate::moderation::{Cell, MemberHasher};
use crate::reader::Reader;
use crate::sink::positions::Ledger;
use crate::sink::store::Store;
use crate::sink::store::StoreError;
use crate::sink::trimmer;
use crate::sink::writer::Writer;
use crate::source::client::{self, ClientError};
use crate::source::{self, Context, SourceError};
use crate::telemetry;
use crate::telemetry::events::{self, RedisCall};

/// Why `run` could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration is invalid: a setting, a board or `[archive]` (exit 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The embedded event schemas did not compile: a build defect (exit 2).
    #[error(transparent)]
    Schema(#[from] SchemaBuildError),
    /// The Kafka consumer could not be created or subscribed; exit 2 unless
    /// the failure was broker trouble (the start-up probe retries that).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The dead-letter producer could not be created from `[kafka]` (exit 2).
    #[error(transparent)]
    DeadLetters(#[from] DeadLetterError),
    /// librdkafka refused the properties of a client rankflow creates (the
    /// consumer, the dead-letter or the period-closed producer), or
    /// `[kafka.client]` sets one rankflow manages (exit 2).
    #[error(transparent)]
    Kafka(#[from] ClientError),
    /// A Redis setting the client cannot use (the message names it).
    #[error("{0}")]
    RedisSettings(StoreError),
    /// Redis refused rankflow for good at start-up: wrong password, or an
    /// ACL that lacks a key or command rankflow needs.
    #[error("setting `redis.url`: Redis refuses rankflow's credentials or permissions: {0}")]
    RedisRefused(StoreError),
    /// The Prometheus recorder behind `/metrics` could not be installed.
    #[error("metrics recorder: {0}")]
    Metrics(String),
    /// The HTTP listener failed (its address could not be read).
    #[error("HTTP listener: {0}")]
    Http(#[from] std::io::Error),
    /// Redis could not be reached (`rankflow archive` does not wait for it).
    #[error("cannot connect to Redis: {0}")]
    RedisDown(StoreError),
    /// `archive.url` or `archive.ca_file` cannot be used (the message
    /// names which).
    #[error("setting {0}")]
    Archive(#[from] ArchiveError),
    /// The audit producer (`[admin] audit_topic`) could not be created
    /// from `[kafka]` (exit 2).
    #[error("setting `admin.audit_topic`: {0}")]
    Audit(#[from] crate::admin::AuditError),
    /// The moderation record was missing and could not be rebuilt from
    /// the audit topic: consuming without it could show erased members.
    #[error("rebuilding the moderation record: {0}")]
    Recover(#[from] crate::admin::recover::RecoverError),
}

impl AppError {
    /// A permanent Redis failure at start-up, by kind: an unusable setting,
    /// or a refusal by the server.
    pub(crate) fn redis(e: StoreError) -> AppError {
        match e {
            e @ StoreError::Config(_) => AppError::RedisSettings(e),
            e => AppError::RedisRefused(e),
        }
    }

    /// Configuration problems exit with 2 (like `rankflow check`).
    pub(crate) fn is_config(&self) -> bool {
        match self {
            AppError::Config(_)
            | AppError::Schema(_)
            | AppError::DeadLetters(_)
            | AppError::Kafka(_)
            | AppError::RedisSettings(_)
            | AppError::RedisRefused(_)
            | AppError::Audit(_) => true,
            AppError::Archive(e) => !e.is_retriable(),
            AppError::Source(e) => !e.is_retriable(),
            AppError::Metrics(_)
            | AppError::Http(_)
            | AppError::RedisDown(_)
            | AppError::Recover(_) => false,
        }
    }
}

/// Every check that needs no server: the boards compile, the event schemas
/// build, librdkafka accepts the consumer's and the dead-letter producer's
/// properties (creating a throw-away client checks them without waiting for
/// a broker), and the Redis URLs and TLS files can be used. Returns the
/// compiled boards. A failure here is permanent: `run` and `check` exit 2
/// naming the setting.
pub(crate) fn preflight(config: &Config) -> Result<BoardSet, AppError> {
    let boards = config.compile_boards()?;
    config.compile_checks()?;
    Decoder::new(config.kafka.max_event_bytes.get())?;
    client::check_run_clients(&config.kafka)?;
    Store::check_settings(&config.redis).map_err(AppError::redis)?;
    check_archive(config)?;
    Ok(boards)
}

/// The archive's settings that can be checked offline: the URL parses, its
/// `sslmode` is known and its CA file (`archive.ca_file`) can be read, and
/// librdkafka accepts the period-closed producer's properties.
fn check_archive(config: &Config) -> Result<(), AppError> {
    if Target::from_config(&config.archive)?.is_none() {
        return Ok(());
    }
    if config.archive.closed_topic.is_some() {
        announce::properties(&config.kafka)?.check()?;
    }
    Ok(())
}

/// The archiver of `rankflow archive`: the boards, Redis and the
/// period-closed producer, checked and connected like `run` does.
pub async fn archiver(config: &Config, clock: SharedClock) -> Result<Archiver, AppError> {
    let boards = Arc::new(preflight(config)?);
    let store = Store::connect(&config.redis).await.map_err(|e| {
        if e.is_permanent_at_startup() {
            AppError::redis(e)
        } else {
            AppError::RedisDown(e)
        }
    })?;
    let announcer = Announcer::new(
        &config.kafka,
        config.archive.closed_topic.as_deref(),
        config.archive.closed_top.get(),
    )?;
    Ok(Archiver::new(
        store,
        boards,
        config.archive.clone(),
        announcer,
        clock,
    ))
}

/// Starts the archiver beside the consumer when `[archive] url` is set. It
/// connects to PostgreSQL (and migrates the schema) in the background, so a
/// database that is down never holds up the consumer.
fn spawn_archiver(
    config: &Config,
    boards: &Arc<BoardSet>,
    store: &Store,
    clock: &SharedClock,
    shutdown: watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, AppError> {
    if !config.archive.enabled() {
        return Ok(None);
    }
    let archive = &config.archive;
    let announcer = Announcer::new(
        &config.kafka,
        archive.closed_topic.as_deref(),
        archive.closed_top.get(),
    )?;
    let archived: Vec<String> = boards
        .boards
        .iter()
        .filter(|b| {
            b.views.iter().any(|v| {
                matches!(
                    v,
                    crate::board::model::ViewSpec::Period {
                        close_after: Some(_),
                        ..
                    }
                )
            })
        })
        .map(|b| b.name.clone())
        .collect();
    telemetry::register_archive_series(&archived, &crate::archive::ERROR_KINDS);
    let archiver = Archiver::new(
        store.clone(),
        boards.clone(),
        archive.clone(),
        announcer,
        clock.clone(),
    );
    tracing::info!(
        url = %archive.url_redacted().unwrap_or_default(),
        boards = ?archived,
        interval_ms = archive.interval_ms.get(),
        "Archiving closed periods."
    );
    Ok(Some(tokio::spawn(archiver.run(shutdown))))
}

/// Runs the consumer until `shutdown` turns true.
pub async fn run(
    config: Config,
    listener: tokio::net::TcpListener,
    clock: SharedClock,
    shutdown: watch::Receiver<bool>,
) -> Result<(), AppError> {
    let metrics = telemetry::install().map_err(AppError::Metrics)?;
    // Fail on anything permanent before waiting for any server.
    let boards = Arc::new(preflight(&config)?);
    let checks = Arc::new(config.compile_checks()?);
    // Reads of archived periods; an unusable URL ends the start-up (exit 2).
    let archive = Target::from_config(&config.archive)?.map(ArchiveReader::with_target);
    let parts = Parts {
        checks,
        dead_letters: DeadLetters::new(&config.kafka)?,
        decoder: Arc::new(Decoder::new(config.kafka.max_event_bytes.get())?),
        boards: boards.clone(),
        clock: clock.clone(),
        health: Arc::new(Health::default()),
    };
    log_notes(&config);
    telemetry::register_series(
        &boards
            .boards
            .iter()
            .map(|b| b.name.clone())
            .collect::<Vec<_>>(),
        &config.kafka.topics,
    );
    telemetry::register_check_series(parts.checks.names());
    let reader_slot = Arc::new(OnceLock::new());
    let moderator_slot = Arc::new(OnceLock::new());
    let audit = Audit::new(&config.kafka, config.admin.audit_topic.as_deref())?;
    let api_state = ApiState {
        boards: boards.clone(),
        clock: clock.clone(),
        health: parts.health.clone(),
        metrics: metrics.clone(),
        reader: reader_slot.clone(),
        streams: Arc::new(
            api::StreamHub::new(config.http.max_streams.get(), shutdown.clone())
                .with_max_pollers(config.http.max_pollers.get()),
        ),
        admin: Arc::new(crate::admin::Tokens::new(&config.admin)),
        moderator: moderator_slot.clone(),
    };
    tracing::info!(listen = %listener.local_addr()?, "HTTP listener ready (/healthz, /metrics, /v1/boards).");
    let http = serve_http(listener, api_state, &config, shutdown.clone());
    spawn_upkeep(metrics, shutdown.clone());

    // Both dependencies are awaited side by side, so /healthz and the log
    // name every one that is down, not only the first. A permanent fault
    // on either side ends the wait at once (try_join).
    let (redis, kafka_ready) = tokio::try_join!(
        connect_redis(&config, &parts.health, shutdown.clone()),
        wait_for_kafka(&config.kafka, &parts.health, shutdown.clone()),
    )?;
    if let (Some(store), true) = (redis, kafka_ready) {
        let archiver = spawn_archiver(&config, &boards, &store, &clock, shutdown.clone())?;
        let _ = moderator_slot.set(moderator(&config, &store, &boards, &clock, audit)?);
        rebuild_moderation(&config, &store, &boards, clock.now_ms()).await?;
        let _ = reader_slot.set(
            Reader::new(boards, store.clone(), clock, archive)
                .with_unions(crate::reader::Unions::new(config.http.union_cache.ms()))
                .with_max_read_entries(config.http.max_read_entries.get())
                .with_topics(config.kafka.topics.clone()),
        );
        consume(&config, parts, store, shutdown).await?;
        if let Some(archiver) = archiver {
            let _ = archiver.await;
        }
    }
    let _ = http.await;
    tracing::info!("Stopped.");
    Ok(())
}

/// The admin API's member actions (docs/moderation.md), on the archive too
/// when there is one.
fn moderator(
    config: &Config,
    store: &Store,
    boards: &Arc<BoardSet>,
    clock: &SharedClock,
    audit: Audit,
) -> Result<Moderator, AppError> {
    Ok(Moderator::new(
        store.clone(),
        boards.clone(),
        member_hasher(config),
        clock.clone(),
        config.http.union_cache.ms(),
        audit,
    )
    .with_archive(Target::from_config(&config.archive)?)
    .with_recovery(&config.kafka, config.admin.audit_topic.as_deref()))
}

/// Before any consumer reads it: the moderation record, rebuilt from
/// `[admin] audit_topic` if Redis lost it (docs/moderation.md); and the
/// promotions of shadow boards (docs/rebuilds.md).
async fn rebuild_moderation(
    config: &Config,
    store: &Store,
    boards: &BoardSet,
    now_ms: i64,
) -> Result<(), AppError> {
    let Some(topic) = config.admin.audit_topic.as_deref() else {
        return Ok(());
    };
    let hasher = member_hasher(config);
    let rebuilt = crate::admin::recover::rebuild_if_lost(
        store,
        &boards.key_prefix,
        &config.kafka,
        topic,
        &hasher,
        now_ms,
    )
    .await?;
    if let Some(r) = rebuilt {
        tracing::warn!(
            hidden = r.hidden,
            erased = r.erased,
            topic,
            "The moderation record was missing from Redis; rebuilt it from the audit topic."
        );
    }
    let promotions =
        crate::admin::promote::restore_if_lost(store, boards, &config.kafka, topic).await?;
    if let Some(n) = promotions.filter(|n| *n > 0) {
        tracing::warn!(
            promotions = n,
            topic,
            "The promotions of shadow boards were missing from Redis; wrote them again from the audit topic."
        );
    }
    Ok(())
}

/// The hasher of member ids, keyed by `[admin] erase_key`
/// (docs/moderation.md).
fn member_hasher(config: &Config) -> MemberHasher {
    MemberHasher::new(config.admin.erase_key.as_ref().map(|k| k.expose()))
}

/// What the consumer loop is built from, besides the config and the store.
struct Parts {
    boards: Arc<BoardSet>,
    checks: Arc<CheckSet>,
    decoder: Arc<Decoder>,
    dead_letters: Option<DeadLetters>,
    clock: SharedClock,
    health: Arc<Health>,
}

/// Warns about valid but noteworthy settings ([`Config::notes`]).
fn log_notes(config: &Config) {
    for note in config.notes() {
        // Notes are written as clauses for `check`; the log gets sentences.
        let mut chars = note.chars();
        let first = chars.next().map(|c| c.to_uppercase().to_string());
        tracing::warn!("{}{}.", first.unwrap_or_default(), chars.as_str());
    }
}

/// Serves the API until shutdown, within the listener's bounds
/// (`[http] max_connections`, `header_timeout`; [`api::listen`]). Its
/// drain runs beside the consumer's, inside the same 10 s.
fn serve_http(
    listener: tokio::net::TcpListener,
    state: ApiState,
    config: &Config,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let limits = api::listen::Limits::of(&config.http);
    tokio::spawn(api::listen::serve(
        listener,
        api::router(state),
        limits,
        shutdown,
    ))
}

/// Runs the metrics recorder's upkeep (histogram buckets, idle series)
/// every 5 s until shutdown.
fn spawn_upkeep(
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => metrics.run_upkeep(),
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    });
}

/// Joins the group and runs the consumer loop, each shadow board's
/// backfill, the window trimmer and the Redis health probe until shutdown.
async fn consume(
    config: &Config,
    parts: Parts,
    store: Store,
    shutdown: watch::Receiver<bool>,
) -> Result<(), AppError> {
    let trim_wanted = Arc::new(Notify::new());
    let trim = tokio::spawn(trimmer::run(
        store.clone(),
        parts.boards.clone(),
        parts.clock.clone(),
        trim_wanted.clone(),
        shutdown.clone(),
    ));
    let health_probe = tokio::spawn(probe_redis(
        store.clone(),
        parts.health.clone(),
        shutdown.clone(),
    ));
    // Checks decide once, live; backfills follow their record, and so do
    // the live consumers for a shadow beside their boards.
    let verdicts = match (&config.kafka.quarantine_topic, parts.checks.is_empty()) {
        (Some(topic), false) => Some(Arc::new(Verdicts::new(
            &config.kafka,
            topic,
            store.clone(),
            &parts.boards.key_prefix,
        ))),
        _ => None,
    };
    let backfills = (&store, &trim_wanted, &shutdown);
    let loops = spawn_backfills(config, &parts, backfills, verdicts.clone()).await?;
    // The shadows the live consumers apply beside their boards where a
    // backfill reached them (docs/rebuilds.md).
    let covers = Covers::new(&parts.boards, verdicts, |name| {
        Ok::<_, AppError>(config.compile_boards()?.consuming(|b| b.name == name))
    })?
    .map(Arc::new);
    let live = Loop {
        boards: Arc::new(config.compile_boards()?.consuming(|b| b.shadow.is_none())),
        checks: parts.checks.clone(),
        dead_letters: parts.dead_letters.clone(),
        ledger: Ledger::live(
            &parts.boards.key_prefix,
            parts
                .boards
                .boards
                .iter()
                .filter(|b| b.shadow.is_none())
                .map(|b| b.stored.as_str()),
        ),
        role: Role::Live,
        health: parts.health.clone(),
        verdicts: None,
        replay: None,
        covers,
    };
    tracing::info!(
        brokers = %config.kafka.brokers,
        group = %config.kafka.group_id,
        topics = ?config.kafka.topics,
        boards = parts.boards.boards.len(),
        "Consuming."
    );
    engine(config, &config.kafka, live, &parts, &store, &trim_wanted)
        .await?
        .run(shutdown)
        .await;
    for l in loops {
        let _ = l.await;
    }
    let _ = trim.await;
    let _ = health_probe.await;
    Ok(())
}

/// Starts each shadow board's backfill loop and the watch of its progress
/// (docs/rebuilds.md).
async fn spawn_backfills(
    config: &Config,
    parts: &Parts,
    (store, trim_wanted, shutdown): (&Store, &Arc<Notify>, &watch::Receiver<bool>),
    verdicts: Option<Arc<Verdicts>>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, AppError> {
    let mut loops = Vec::new();
    for shadow in parts.boards.shadows() {
        let name = shadow.name.clone();
        let from = shadow.shadow.as_ref().and_then(|s| s.backfill_from);
        let backfill = Loop {
            boards: Arc::new(config.compile_boards()?.consuming(|b| b.name == name)),
            checks: Default::default(),
            dead_letters: None,
            ledger: Ledger::backfill(&parts.boards.key_prefix, &name, from.is_some()),
            role: Role::Backfill,
            health: Arc::new(Health::default()),
            verdicts: verdicts.clone(),
            replay: from.map(|from_ms| {
                Arc::new(Replay {
                    kafka: config.kafka.clone(),
                    board: name.clone(),
                    from_ms,
                })
            }),
            covers: None,
        };
        loops.push(tokio::spawn(backfill::progress::watch(
            store.clone(),
            parts.boards.key_prefix.clone(),
            name.clone(),
            config.kafka.topics.clone(),
            shutdown.clone(),
        )));
        let kafka = backfill::kafka_config(&config.kafka, &name);
        let engine = engine(config, &kafka, backfill, parts, store, trim_wanted).await?;
        loops.push(tokio::spawn(engine.run(shutdown.clone())));
    }
    Ok(loops)
}

/// What differs between the live consumer loop and a backfill's.
struct Loop {
    /// The boards, with only those this loop applies events to consuming.
    boards: Arc<BoardSet>,
    checks: Arc<CheckSet>,
    dead_letters: Option<DeadLetters>,
    ledger: Ledger,
    role: Role,
    health: Arc<Health>,
    /// A backfill's record of what the live checks quarantined.
    verdicts: Option<Arc<Verdicts>>,
    /// A backfill's start in partitions it has no position for.
    replay: Option<Arc<Replay>>,
    /// The live loop's shadow boards, applied beside its own where their
    /// backfill reached it.
    covers: Option<Arc<Covers>>,
}

/// Subscribes a consumer in `kafka`'s group and builds its loop.
async fn engine(
    config: &Config,
    kafka: &KafkaConfig,
    l: Loop,
    parts: &Parts,
    store: &Store,
    trim_wanted: &Arc<Notify>,
) -> Result<Engine, AppError> {
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut context = Context::new(events_tx, l.health.clone());
    if l.role == Role::Backfill {
        // The live consumer's lag gauges name the same partitions.
        context = context.without_lag();
    }
    let consumer = Arc::new(source::subscribe(kafka, context)?);
    let writer = Arc::new(
        Writer::new(store.clone(), l.boards.clone())
            .with_moderation(Arc::new(Cell::new(member_hasher(config)))),
    );
    // Read now so the first batch's outcomes know who is hidden or erased;
    // if Redis fails here, the first flush reads it.
    if let Err(e) = writer.load_moderation().await {
        tracing::warn!(error = %e, "Could not read the moderation record at start-up; the first batch reads it.");
    }
    let flusher = Flusher {
        writer,
        checks: l.checks.clone(),
        rating: Default::default(),
        clock: parts.clock.clone(),
        health: l.health.clone(),
        dead_letters: l.dead_letters,
        ledger: l.ledger,
        verdicts: l.verdicts,
        replay: l.replay,
        covers: l.covers,
    };
    Ok(Engine {
        boards: l.boards,
        checks: l.checks,
        decoder: parts.decoder.clone(),
        consumer,
        rebalances: events_rx,
        clock: parts.clock.clone(),
        health: l.health,
        batch: config.batch.clone(),
        max_event_bytes: config.kafka.max_event_bytes.get(),
        trim_wanted: trim_wanted.clone(),
        flusher,
        role: l.role,
    })
}

/// Connects to Redis, retrying with capped backoff and one log line per
/// attempt while it is unreachable; `None` when shutdown came first. A
/// permanent refusal (password, ACL, unusable setting) is returned at once.
async fn connect_redis(
    config: &Config,
    health: &Health,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Option<Store>, AppError> {
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1u32;
    // Operators need to see which server is meant; never its password.
    let url = config.redis.url.redacted();
    loop {
        match Store::connect(&config.redis).await {
            Ok(store) => {
                health.redis_ok();
                events::RedisReachable.emit();
                tracing::info!(attempt, url = %url, "Connected to Redis and loaded the apply script.");
                return Ok(Some(store));
            }
            Err(e) if e.is_permanent_at_startup() => {
                health.redis_failed(&format!("{url} refused rankflow: {e}"));
                return Err(AppError::redis(e));
            }
            Err(e) => {
                let why = format!("cannot connect to {url}: {e}");
                health.redis_failed(&why);
                events::RedisFailed {
                    call: RedisCall::Connect,
                    kind: e.kind(),
                    error: &why,
                    attempt,
                    events: 0,
                    retry_in: delay,
                }
                .emit();
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.wait_for(|s| *s) => return Ok(None),
        }
        delay = (delay * 2).min(Duration::from_secs(5));
        attempt += 1;
    }
}

/// Asks the brokers for metadata until one answers, with capped backoff and
/// one log line per failed attempt; `false` when shutdown came first. Only
/// at start-up: once the consumer runs, its own callbacks report Kafka.
async fn wait_for_kafka(
    config: &KafkaConfig,
    health: &Health,
    mut shutdown: watch::Receiver<bool>,
) -> Result<bool, AppError> {
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1u32;
    loop {
        let probe = tokio::select! {
            r = source::probe::reachable(config) => r,
            _ = shutdown.wait_for(|s| *s) => return Ok(false),
        };
        match probe {
            Ok(()) => {
                health.kafka_ok();
                tracing::info!(attempt, brokers = %config.brokers, "Kafka brokers are reachable.");
                return Ok(true);
            }
            Err(e) if !e.is_retriable() => return Err(e.into()),
            Err(e) => {
                health.kafka_failed(&format!("cannot reach {}: {e}", config.brokers));
                tracing::warn!(attempt, brokers = %config.brokers, error = %e, retry_in_ms = delay.as_millis() as u64, "Kafka is not reachable yet; retrying.");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.wait_for(|s| *s) => return Ok(false),
        }
        delay = (delay * 2).min(Duration::from_secs(5));
        attempt += 1;
    }
}

/// Keeps `/healthz` honest while no batches flow: a PING every second. Also
/// watches Redis's run id: a new one (restart, failover) may mean lost
/// writes, which the consumer loop answers by re-reading from the positions
/// Redis has.
async fn probe_redis(store: Store, health: Arc<Health>, mut shutdown: watch::Receiver<bool>) {
    let mut run_id: Option<String> = None;
    let mut tick = 0u64;
    loop {
        tick += 1;
        // On a cluster INFO goes to any node, so run ids are not compared
        // there; NOSCRIPT from a restarted node still reveals lost state.
        if tick % 5 == 1
            && !store.is_cluster()
            && let Ok(info) = store
                .query::<String>(redis::cmd("INFO").arg("server"))
                .await
        {
            let id = info
                .lines()
                .find_map(|l| l.strip_prefix("run_id:"))
                .map(|s| s.trim().to_string());
            if let (Some(old), Some(new)) = (&run_id, &id)
                && old != new
            {
                tracing::warn!(old = %old, new = %new, "Redis run id changed (restart or failover).");
                store.note_lost_state(store.epoch()).await;
            }
            if id.is_some() {
                run_id = id;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        // Also keeps `rankflow_redis_up` fresh while no batches flow
        // (gauges not updated for 30 s leave /metrics).
        match store.query::<String>(&redis::cmd("PING")).await {
            Ok(_) => {
                health.redis_ok();
                events::RedisReachable.emit();
            }
            Err(e) => {
                health.redis_failed(&format!("PING failed: {e}"));
                events::RedisFailed {
                    call: RedisCall::Ping,
                    kind: e.kind(),
                    error: &e,
                    attempt: 0,
                    events: 0,
                    retry_in: Duration::ZERO,
                }
                .emit();
            }
        }
    }
}
