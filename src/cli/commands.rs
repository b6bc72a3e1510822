//! The commands themselves: [`execute`] loads the configuration once, maps
//! its errors once, and runs `run`, `check`, `produce`, `top`, `archive`,
//! `member` or `release`, handing over to [`crate::app`],
//! [`crate::produce`], the [`Reader`], the [`crate::archive::runner`], the
//! [`crate::admin::Moderator`] and [`crate::release`]. A signal ends a command
//! through the `shutdown` receiver the binary gives.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

use crate::archive::connect::Target;
use crate::archive::read::ArchiveReader;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::produce::ProduceError;
use crate::reader::{Query, RankStyle, Reader, ScopeUnion, Unions};
use crate::sink::store::Store;

use super::args::{
    ArchiveArgs, Command, MemberArgs, MemberVerb, ProduceArgs, TopArgs, parse_types,
};
use super::describe::describe;
use super::error::CommandError;
use super::render::{render, render_archive};
use crate::release::ReleaseError;

/// Runs `command` with the configuration it names, until it is done or
/// `shutdown` turns true (SIGTERM or SIGINT). `Ok` carries the exit code
/// of a command that did its work (`archive` exits 1 when a period failed).
pub async fn execute(
    command: Command,
    clock: SharedClock,
    shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, CommandError> {
    let path = command.config().to_path_buf();
    let cfg = Config::load(&path).map_err(|e| CommandError::Invalid(e.to_string()))?;
    let path = path.as_path();
    match command {
        Command::Check { .. } => check(path, &cfg, clock),
        Command::Run { .. } => run(path, cfg, clock, shutdown).await,
        Command::Produce(args) => produce(path, &cfg, args, clock, shutdown).await,
        Command::Top(args) => top(path, &cfg, args, clock, shutdown).await,
        Command::Archive(args) => archive(path, &cfg, args, clock).await,
        Command::Member(args) => member(path, &cfg, args, clock).await,
        Command::Release(args) => release(path, &cfg, &args.source, clock).await,
    }
}

/// The same checks as `run` makes before connecting, plus the producer of
/// `rankflow produce`; no server is contacted.
fn check(path: &Path, cfg: &Config, clock: SharedClock) -> Result<ExitCode, CommandError> {
    let boards = crate::app::preflight(cfg).map_err(|e| CommandError::fault(path, e))?;
    crate::produce::check(&cfg.kafka).map_err(|e| CommandError::fault(path, e))?;
    print!("{}", describe(cfg, &boards, clock.now_ms()));
    Ok(ExitCode::SUCCESS)
}

async fn run(
    path: &Path,
    cfg: Config,
    clock: SharedClock,
    mut shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, CommandError> {
    let listen = cfg.http.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CommandError::failed(format!("cannot listen on {listen}"), e))?;
    let running = shutdown.clone();
    tokio::spawn(async move {
        if shutdown.wait_for(|stop| *stop).await.is_ok() {
            tracing::info!("Shutdown requested; draining the batch in hand.");
        }
    });
    match crate::app::run(cfg, listener, clock, running).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.is_config() => Err(CommandError::fault(path, e)),
        Err(e) => Err(CommandError::failed("the consumer stopped", e)),
    }
}

async fn produce(
    path: &Path,
    cfg: &Config,
    args: ProduceArgs,
    clock: SharedClock,
    mut shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, CommandError> {
    let types = parse_types(&args.types).map_err(CommandError::Invalid)?;
    let topic = args
        .topic
        .or_else(|| cfg.kafka.topics.first().cloned())
        .ok_or_else(|| {
            CommandError::Invalid("no topic: give --topic or configure kafka.topics".into())
        })?;
    // [kafka.client] (TLS, SASL...) applies to this producer too.
    let client = crate::source::client::producer_user_properties(&cfg.kafka)
        .map_err(|e| CommandError::fault(path, e))?;
    let options = crate::produce::Options {
        brokers: cfg.kafka.brokers.clone(),
        topic,
        events: args.events,
        rate: args.rate,
        members: args.members,
        receivers: args.receivers,
        games: args.games,
        types,
        skew: args.skew,
        key: args.key,
        seed: args.seed,
        client,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        if shutdown.wait_for(|stop| *stop).await.is_ok() {
            flag.store(true, Ordering::SeqCst);
        }
    });
    let produced = tokio::task::spawn_blocking(move || {
        crate::produce::run(&options, clock, &|| stop.load(Ordering::SeqCst))
    })
    .await
    .map_err(|e| CommandError::failed("the producer stopped", e))?;
    match produced {
        Ok(sent) => {
            println!("produced {sent} events");
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ ProduceError::Client(_)) => Err(CommandError::fault(path, e)),
        Err(e) => Err(CommandError::failed("producing", e)),
    }
}

/// Connects to Redis for a command: a permanent refusal is a fault of the
/// configuration (exit 2), anything else a failure (exit 1).
async fn connect(path: &Path, cfg: &Config) -> Result<Store, CommandError> {
    match Store::connect(&cfg.redis).await {
        Ok(s) => Ok(s),
        Err(e) if e.is_permanent_at_startup() => {
            Err(CommandError::fault(path, crate::app::AppError::redis(e)))
        }
        Err(e) => Err(CommandError::failed("cannot connect to Redis", e)),
    }
}

/// `rankflow release`: one reviewed quarantined message to the boards,
/// exactly once; prints what became of it.
async fn release(
    path: &Path,
    cfg: &Config,
    source: &str,
    clock: SharedClock,
) -> Result<ExitCode, CommandError> {
    let boards = Arc::new(
        cfg.compile_boards()
            .map_err(|e| CommandError::fault(path, e))?,
    );
    let store = connect(path, cfg).await?;
    match crate::release::release(cfg, boards, store, source, clock.now_ms()).await {
        Ok(r) => {
            println!("released {source} (check {}): {}", r.check, r.outcome);
            Ok(ExitCode::SUCCESS)
        }
        Err(ReleaseError::Invalid(m)) => Err(CommandError::Invalid(m)),
        Err(e) => Err(CommandError::failed("the release", e)),
    }
}

/// `rankflow member`: the admin API's member actions from the
/// configuration, audited with actor `cli`; prints the member's state as
/// JSON.
async fn member(
    path: &Path,
    cfg: &Config,
    args: MemberArgs,
    clock: SharedClock,
) -> Result<ExitCode, CommandError> {
    use crate::admin::{ActionRequest, Audit, MemberAction, MemberError, Moderator};
    use crate::moderation::MemberHasher;
    let boards = cfg
        .compile_boards()
        .map_err(|e| CommandError::fault(path, e))?;
    let audit = Audit::new(&cfg.kafka, cfg.admin.audit_topic.as_deref())
        .map_err(|e| CommandError::fault(path, e))?;
    let store = connect(path, cfg).await?;
    let moderator = Moderator::new(
        store,
        Arc::new(boards),
        MemberHasher::new(cfg.admin.erase_key.as_ref().map(|k| k.expose())),
        clock,
        cfg.http.union_cache.ms(),
        audit,
    )
    .with_archive(Target::from_config(&cfg.archive).map_err(|e| CommandError::fault(path, e))?)
    .with_recovery(&cfg.kafka, cfg.admin.audit_topic.as_deref());
    let action = match args.action {
        MemberVerb::Show => None,
        MemberVerb::Hide => Some(MemberAction::Hide),
        MemberVerb::Restore => Some(MemberAction::Restore),
        MemberVerb::Erase => Some(MemberAction::Erase),
    };
    let report = match action {
        None => moderator.show(&args.member).await,
        Some(action) => {
            let req = ActionRequest {
                member: args.member,
                boards: (!args.boards.is_empty()).then_some(args.boards),
                reason: args.reason,
            };
            moderator.act(action, &req, "cli").await
        }
    };
    match report {
        Ok(r) => {
            println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ MemberError::BadRequest(_)) => Err(CommandError::Invalid(e.to_string())),
        Err(e) => Err(CommandError::failed("the member action", e)),
    }
}

async fn top(
    path: &Path,
    cfg: &Config,
    args: TopArgs,
    clock: SharedClock,
    shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, CommandError> {
    let boards = cfg
        .compile_boards()
        .map_err(|e| CommandError::fault(path, e))?;
    let store = connect(path, cfg).await?;
    let archive = Target::from_config(&cfg.archive)
        .map_err(|e| CommandError::fault(path, e))?
        .map(ArchiveReader::with_target);
    let reader = Reader::new(Arc::new(boards), store, clock.clone(), archive)
        .with_unions(Unions::new(cfg.http.union_cache.ms()))
        .with_max_read_entries(cfg.http.max_read_entries.get());
    let given: Vec<&str> = args.scope.iter().map(String::as_str).collect();
    let (scope, scope_union) =
        ScopeUnion::choose(&given).map_err(|e| CommandError::Invalid(format!("--scope: {e}")))?;
    let q = Query {
        board: args.board,
        view: args.view,
        scope,
        scope_union,
        period: args.period,
    };
    let page = Page {
        limit: args.limit,
        rank: args.rank,
    };
    print_top(&reader, &q, page, args.watch.then_some((clock, shutdown)))
        .await
        .map_err(|e| CommandError::failed("reading the board", e))?;
    Ok(ExitCode::SUCCESS)
}

/// What one `rankflow top` page shows.
#[derive(Debug, Clone, Copy)]
struct Page {
    limit: usize,
    rank: RankStyle,
}

/// One page, or with `watch` (the clock of the header line and the end
/// signal) a redraw every second until the signal.
async fn print_top(
    reader: &Reader,
    q: &Query,
    page: Page,
    mut watch: Option<(SharedClock, watch::Receiver<bool>)>,
) -> Result<(), crate::reader::ReadError> {
    loop {
        let list = reader.top_ranked(q, 0, page.limit, page.rank).await?;
        let Some((clock, stop)) = watch.as_mut() else {
            print!("{}", render(&list));
            return Ok(());
        };
        // Clear the screen and home the cursor, so the board redraws in place.
        print!("\x1b[2J\x1b[H");
        let now = chrono::DateTime::from_timestamp_millis(clock.now_ms())
            .map(|t| t.format("%H:%M:%S").to_string())
            .unwrap_or_default();
        println!("rankflow top — {now} (Ctrl-C to stop)\n");
        print!("{}", render(&list));
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
        }
    }
}

/// `rankflow archive`: one pass over what is due (or one period copied
/// again), a line per period and a total; exit 1 if any period failed.
async fn archive(
    path: &Path,
    cfg: &Config,
    args: ArchiveArgs,
    clock: SharedClock,
) -> Result<ExitCode, CommandError> {
    if !cfg.archive.enabled() {
        return Err(CommandError::fault(
            path,
            "[archive] url is not set: there is no archive",
        ));
    }
    let mut archiver = match crate::app::archiver(cfg, clock).await {
        Ok(a) => a,
        Err(e) if e.is_config() => return Err(CommandError::fault(path, e)),
        Err(e) => return Err(CommandError::failed("starting the archiver", e)),
    };
    if let Err(e) = archiver.connect().await {
        // Periods are still closed and measured; the copies then fail.
        eprintln!("error: {e}");
    }
    // clap requires --board with --period.
    let reports = match (&args.board, &args.period) {
        (Some(board), Some(period)) => archiver.recopy(board, period, args.scope.as_deref()).await,
        (board, _) => archiver.pass(board.as_deref()).await,
    };
    let reports = match reports {
        Ok(r) => r,
        Err(e) if e.is_retriable() => return Err(CommandError::failed("archiving", e)),
        Err(e) => return Err(CommandError::fault(path, e)),
    };
    let (text, ok) = render_archive(&reports);
    print!("{text}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
