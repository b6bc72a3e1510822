//! Applying events without Kafka: decode, rules, batch and the Lua apply
//! script exactly as the consumer does, with a clock the test sets. For
//! tests of board semantics that need many cases or exact event times.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rankflow::board::BoardSet;
use rankflow::board::resolve::Resolver;
use rankflow::clock::{ManualClock, SharedClock};
use rankflow::config::Config;
use rankflow::engine::batch::{Batch, Taken};
use rankflow::event::Decoder;
use rankflow::reader::Reader;
use rankflow::sink::report::FlushReport;
use rankflow::sink::store::{Store, StoreError};
use rankflow::sink::writer::Writer;
use rankflow::telemetry::Outcome;

pub struct Direct {
    pub boards: Arc<BoardSet>,
    pub store: Store,
    pub clock: ManualClock,
    decoder: Decoder,
    /// Writes batches as the consumer's flushes do.
    writer: Writer,
    resolver: Resolver,
    offsets: [i64; 2],
    /// The last batch applied, for [`Direct::redeliver_last`].
    last: Option<(Batch, i64)>,
    /// `[admin] erase_key`, for [`Direct::moderator`].
    erase_key: Option<String>,
}

impl Direct {
    /// `boards` is TOML of `[[board]]` tables (and top-level settings before them).
    pub async fn new(redis_url: &str, prefix: &str, boards: &str, now: i64) -> Direct {
        Direct::with_url_toml(&format!("\"{redis_url}\""), prefix, boards, now).await
    }

    /// [`Direct::new`] with `redis.url` as a TOML value (a list of node URLs
    /// for a Redis Cluster: `RedisCluster::toml_urls`).
    pub async fn with_url_toml(url: &str, prefix: &str, boards: &str, now: i64) -> Direct {
        let text = format!(
            "{boards}\n[kafka]\nbrokers = \"unused:9092\"\ntopics = [\"t\"]\n[redis]\nurl = {url}\nkey_prefix = \"{prefix}\"\n"
        );
        let cfg = Config::from_toml(&text, Path::new("direct.toml"), Vec::new()).expect("config");
        let boards = Arc::new(cfg.compile_boards().expect("boards"));
        let store = Store::connect(&cfg.redis).await.expect("redis");
        Direct {
            resolver: Resolver::new(&boards),
            writer: Writer::new(store.clone(), boards.clone()),
            boards,
            store,
            clock: ManualClock::new(now),
            decoder: Decoder::new(65536).expect("decoder"),
            offsets: [0; 2],
            last: None,
            erase_key: None,
        }
    }

    /// The same, with `[admin] erase_key` set (the keyed hashes of member
    /// ids the consumer and [`Direct::moderator`] share).
    pub fn with_erase_key(mut self, key: &str) -> Direct {
        let cell =
            rankflow::moderation::Cell::new(rankflow::moderation::MemberHasher::new(Some(key)));
        self.writer =
            Writer::new(self.store.clone(), self.boards.clone()).with_moderation(Arc::new(cell));
        self.erase_key = Some(key.to_string());
        self
    }

    /// Reads the moderation record, as the consumer does when it starts.
    pub async fn load_moderation(&self) {
        self.writer
            .load_moderation()
            .await
            .expect("moderation record");
    }

    /// The admin API's member actions for these boards, on this clock,
    /// without waiting for cached unions (no reader caches any here).
    pub fn moderator(&self) -> rankflow::admin::Moderator {
        rankflow::admin::Moderator::new(
            self.store.clone(),
            self.boards.clone(),
            rankflow::moderation::MemberHasher::new(self.erase_key.as_deref()),
            Arc::new(self.clock.clone()),
            0,
            rankflow::admin::Audit::log_only(),
        )
    }

    /// Takes over `other`'s partitions where it stopped, as a consumer
    /// restarted with another configuration reads on from the committed
    /// offsets (new events are not redeliveries to the fences).
    pub fn take_over(&mut self, other: &Direct) {
        self.offsets = other.offsets;
    }

    pub fn now(&self) -> i64 {
        rankflow::clock::Clock::now_ms(&self.clock)
    }

    /// Applies one batch of events (JSON values) at the current clock;
    /// returns each event's outcome and the flush report.
    pub async fn apply(&mut self, events: &[serde_json::Value]) -> (Vec<Outcome>, FlushReport) {
        let now = self.now();
        let (batch, outcomes) = self.batch(events, now);
        let report = self.send(&batch, now).await;
        self.last = Some((batch, now));
        (outcomes, report)
    }

    /// A batch of `events` at clock `now`, as the consumer builds it, and
    /// each event's outcome before Redis answered.
    fn batch(&mut self, events: &[serde_json::Value], now: i64) -> (Batch, Vec<Outcome>) {
        let topic: Arc<str> = Arc::from("t");
        let mut batch = Batch::default();
        let mut outcomes = Vec::new();
        for (j, json) in events.iter().enumerate() {
            let partition = (j % 2) as i32;
            let offset = self.offsets[partition as usize];
            self.offsets[partition as usize] += 1;
            let part = batch.take_message(&topic, partition, offset);
            let event = self
                .decoder
                .decode(json.to_string().as_bytes())
                .expect("valid event");
            let mut updates = Vec::new();
            rankflow::rules::evaluate(&self.boards, &event, &mut updates).expect("rules");
            let taken = Taken {
                part,
                offset,
                ts: event.ts,
                kind: event.kind,
            };
            outcomes.push(batch.add_moderated_event(
                &self.boards,
                &mut self.resolver,
                taken,
                &mut updates,
                now,
                &self.writer.moderation().current(),
            ));
        }
        (batch, outcomes)
    }

    async fn send(&self, batch: &Batch, now: i64) -> FlushReport {
        self.try_send(batch, now).await.expect("apply")
    }

    async fn try_send(&self, batch: &Batch, now: i64) -> Result<FlushReport, StoreError> {
        let prepared = self.writer.prepare(&batch.updates);
        self.writer
            .apply(&batch.updates, &prepared, &self.store.scripts(), now)
            .await
    }

    /// [`Direct::apply`], returning the failure of the attempt instead of
    /// panicking; a failed batch is not kept for [`Direct::redeliver_last`].
    pub async fn try_apply(
        &mut self,
        events: &[serde_json::Value],
    ) -> Result<FlushReport, StoreError> {
        let now = self.now();
        let batch = self.batch(events, now).0;
        let report = self.try_send(&batch, now).await?;
        self.last = Some((batch, now));
        Ok(report)
    }

    /// The outcome counts of the last batch applied, settled from `report`
    /// as the consumer settles them: (outcome, events), events late on
    /// arrival included.
    pub fn settle_last(&self, report: &FlushReport) -> Vec<(Outcome, u64)> {
        let (batch, _) = self.last.as_ref().expect("a batch was applied");
        let mut out: BTreeMap<Outcome, u64> = BTreeMap::new();
        for (_, _, outcome, n) in batch.settle(report).outcomes {
            *out.entry(outcome).or_insert(0) += n;
        }
        out.into_iter().collect()
    }

    /// Applies the last batch again, with its offsets: a redelivery.
    pub async fn redeliver_last(&mut self) -> FlushReport {
        let (batch, now) = self.last.take().expect("a batch was applied");
        let report = self.send(&batch, now).await;
        self.last = Some((batch, now));
        report
    }

    /// Serves `api::router` for these boards with `slot` as the reader, on a
    /// free port; returns its base URL.
    pub async fn serve(&self, slot: Arc<OnceLock<Reader>>) -> String {
        let clock: SharedClock = Arc::new(self.clock.clone());
        let state = rankflow::api::ApiState {
            boards: self.boards.clone(),
            clock,
            health: Arc::new(rankflow::health::Health::default()),
            metrics: metrics_exporter_prometheus::PrometheusBuilder::new()
                .build_recorder()
                .handle(),
            reader: slot,
            streams: Default::default(),
            admin: Arc::new(rankflow::admin::Tokens::none()),
            moderator: Default::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, rankflow::api::router(state)).await });
        format!("http://{addr}")
    }

    pub fn reader(&self) -> Reader {
        let clock: SharedClock = Arc::new(self.clock.clone());
        Reader::new(self.boards.clone(), self.store.clone(), clock, None)
    }
}

/// The read API served in-process on a free port over its own
/// redis-server and key prefix, with no Kafka: what the HTTP tests read
/// boards they wrote with plain Redis commands or [`Direct`] through.
pub struct ServedApi {
    pub redis: super::Redis,
    pub prefix: String,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub direct: Direct,
}

impl ServedApi {
    /// `boards` under a fresh prefix named after `name`, the clock at `now_ms`.
    pub async fn start(name: &str, boards: &str, now_ms: i64) -> ServedApi {
        let redis = super::Redis::start();
        let prefix = super::unique(name);
        let direct = Direct::new(&redis.url(), &prefix, boards, now_ms).await;
        let slot = Arc::new(OnceLock::new());
        let _ = slot.set(direct.reader());
        let base = direct.serve(slot).await;
        ServedApi {
            redis,
            prefix,
            base,
            direct,
        }
    }

    /// The URL of `path` (with its query) on this API.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}
