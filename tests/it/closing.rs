//! Closing archived periods in the write path (docs/history.md; the guards are in
//! docs/exactly-once.md, "Closing archived periods"), against real Redis
//! (single node and a three-primary cluster) and, end to end, real tansu:
//!
//! - an event whose period has closed by the consumer's clock (end + grace)
//!   is `late` and changes nothing;
//! - after the archiver's `K:closed` marker is set (here by the test), an
//!   event for that still-open-by-clock period is `late` on that view while
//!   the other views and boards of the same event still take it;
//! - archived period keys carry no expiry, others keep theirs;
//! - the due set holds exactly the archived periods with data, scored with
//!   their close time, and is written before the batch (a failed
//!   registration applies nothing);
//! - a consumer `kill -9`ed mid-stream leaves every board exact.
//!
//! Expected boards come from a small model of the rules written here
//! (chrono's UTC dates, plain sums and "last"), not from rankflow's code.
//! No PostgreSQL is needed: the archive URL points to a closed port and the
//! archiver's interval is an hour.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::direct::Direct;
use common::reference::*;
use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use rankflow::sink::reply::CLOSED_CUTOFF;
use rankflow::telemetry::Outcome;
use serde_json::json;

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;
const GRACE: i64 = 10 * MIN;

/// `[archive]` with an unreachable PostgreSQL and an archiver that would
/// not tick during a test: only the write path is exercised.
fn archive_settings(grace: &str) -> String {
    format!(
        "[archive]\nurl = \"postgres://rankflow@127.0.0.1:{}/none\"\ngrace = \"{grace}\"\ninterval_ms = 3600000\n",
        free_port()
    )
}

/// `days` and `lasts` archive their day; `totals` and `hours` take the same
/// gifts except "solo" ones, unarchived. So a "solo" gift only reaches
/// archived views.
const BOARDS: &str = r#"
[[board]]
name = "days"
event = "gift"
member = "receiver_id"
score = "count"
periods = ["day"]
archive = ["day"]

[[board]]
name = "lasts"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
aggregate = "last"
periods = ["day"]
archive = ["day"]

[[board]]
name = "totals"
event = "gift"
filter = 'gift_id != "solo"'
member = "receiver_id"
score = "count"
periods = ["all"]

[[board]]
name = "hours"
event = "gift"
filter = 'gift_id != "solo"'
member = "receiver_id"
score = "count"
periods = ["hour"]
"#;

#[derive(Debug, Clone, Copy)]
struct Gift {
    sender: &'static str,
    receiver: &'static str,
    gift: &'static str,
    count: i64,
    ts: i64,
}

impl Gift {
    fn json(&self, i: usize) -> serde_json::Value {
        json!({"type": "gift", "event_id": format!("c{i}-{}", self.ts), "ts": self.ts,
               "sender_id": self.sender, "receiver_id": self.receiver, "gift_id": self.gift,
               "count": self.count, "value": 1})
    }
}

fn utc(ts: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ts).expect("ts in range")
}

fn day_view(ts: i64) -> String {
    format!("day:{}", utc(ts).format("%Y-%m-%d"))
}

fn day_end(ts: i64) -> i64 {
    (ts.div_euclid(DAY) + 1) * DAY
}

/// The rules of [`BOARDS`], applied the plain way.
#[derive(Default)]
struct Model {
    boards: Boards,
    /// `lasts` entries: (scope/view, member) → (ts, value).
    last: BTreeMap<(String, String), (i64, i64)>,
    /// `tag/view` of periods closed by the archiver's marker.
    markers: BTreeSet<String>,
    /// Due-set member → close time.
    due: BTreeMap<String, i64>,
    applied: u64,
    late: u64,
}

impl Model {
    fn add(&mut self, name: &str, member: &str, v: i64) {
        *self
            .boards
            .entry(name.into())
            .or_default()
            .entry(member.into())
            .or_insert(0.0) += v as f64;
    }

    /// Whether the archived `tag/view` of an event at `ts` takes it at
    /// clock `now`; registers it as due if so. A closed view's board is
    /// expected to be whatever it was (an empty one if it never took any).
    fn open(&mut self, tag: &str, ts: i64, now: i64) -> bool {
        let name = format!("{tag}/{}", day_view(ts));
        let close = day_end(ts) + GRACE;
        if now >= close || self.markers.contains(&name) {
            self.boards.entry(name).or_default();
            return false;
        }
        self.due
            .insert(format!("{{{tag}}}:{}", day_view(ts)), close);
        true
    }

    fn apply(&mut self, g: &Gift, now: i64) {
        let mut took = false;
        if self.open("days", g.ts, now) {
            self.add(&format!("days/{}", day_view(g.ts)), g.receiver, g.count);
            took = true;
        }
        let lasts = format!("lasts:{}", g.receiver);
        if self.open(&lasts, g.ts, now) {
            let name = format!("{lasts}/{}", day_view(g.ts));
            let e = self
                .last
                .entry((name.clone(), g.sender.into()))
                .or_insert((i64::MIN, 0));
            if (g.ts, g.count) > *e {
                *e = (g.ts, g.count);
            }
            let v = e.1 as f64;
            self.boards
                .entry(name)
                .or_default()
                .insert(g.sender.into(), v);
            took = true;
        }
        if g.gift != "solo" {
            self.add("totals/all", g.receiver, g.count);
            let hour = format!("hours/hour:{}", utc(g.ts).format("%Y-%m-%dT%H"));
            self.add(&hour, g.receiver, g.count);
            took = true;
        }
        if took {
            self.applied += 1;
        } else {
            self.late += 1;
        }
    }
}

/// Noon of the next UTC day: ahead of the real clock, so that every expiry
/// the test checks lies in Redis's future.
fn noon_tomorrow() -> i64 {
    (now_ms() / DAY + 1) * DAY + 12 * HOUR
}

/// First batch at clock `t0` (noon): gifts of the day, and gifts of the day
/// before, which closed at 00:10.
fn phase_one(t0: i64) -> Vec<Gift> {
    let g = |sender, receiver, gift, count, ts| Gift {
        sender,
        receiver,
        gift,
        count,
        ts,
    };
    vec![
        g("u1", "s1", "rose", 3, t0 - 3 * HOUR),
        g("u2", "s1", "solo", 5, t0 - 2 * HOUR),
        g("u1", "s2", "solo", 7, t0 - HOUR),
        g("u3", "s2", "rose", 2, t0 - HOUR + MIN),
        // Yesterday 23:00: closed by the clock. The solo gift reaches only
        // archived views (late); the rose reaches `totals` and `hours` too.
        g("u1", "s1", "solo", 4, t0 - 13 * HOUR),
        g("u4", "s1", "rose", 6, t0 - 13 * HOUR + MIN),
    ]
}

/// Second batch, same clock, once the markers of `days` and `lasts:s1`
/// for today are set.
fn phase_two(t0: i64) -> Vec<Gift> {
    let g = |sender, receiver, gift, count, ts| Gift {
        sender,
        receiver,
        gift,
        count,
        ts,
    };
    vec![
        g("u5", "s1", "solo", 1, t0 - 30 * MIN),
        g("u5", "s2", "solo", 2, t0 - 20 * MIN),
        g("u6", "s1", "rose", 4, t0 - 10 * MIN),
        g("u2", "s1", "solo", 9, t0 - 5 * MIN),
    ]
}

/// Redis commands from the test, on a single node or a cluster.
enum Admin {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Admin {
    async fn single(redis: &Redis) -> Admin {
        Admin::Single(redis.conn().await)
    }

    async fn cluster(cluster: &RedisCluster) -> Admin {
        let urls: Vec<String> = cluster.nodes.iter().map(Redis::url).collect();
        let client = redis::cluster::ClusterClient::new(urls).expect("cluster client");
        Admin::Cluster(client.get_async_connection().await.expect("cluster"))
    }

    async fn q<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> T {
        match self {
            Admin::Single(c) => cmd.query_async(c).await,
            Admin::Cluster(c) => cmd.query_async(c).await,
        }
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    }

    async fn due(&mut self, prefix: &str) -> BTreeMap<String, i64> {
        let v: Vec<(String, i64)> = self
            .q(redis::cmd("ZRANGE")
                .arg(format!("{prefix}:archive:due"))
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES"))
            .await;
        v.into_iter().collect()
    }

    async fn pexpiretime(&mut self, key: &str) -> i64 {
        self.q(redis::cmd("PEXPIRETIME").arg(key)).await
    }

    async fn boards(&mut self, prefix: &str, names: &Boards) -> Boards {
        let mut out = Boards::new();
        for name in names.keys() {
            let (tag, view) = name.split_once('/').expect("tag/view");
            let v: Vec<(String, f64)> = self
                .q(redis::cmd("ZRANGE")
                    .arg(format!("{prefix}:{{{tag}}}:{view}"))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"))
                .await;
            out.insert(name.clone(), v.into_iter().collect());
        }
        out
    }
}

/// The keys of archived periods (and `lasts`'s `:t`) carry no expiry; the
/// hour views and the fences keep theirs, the fences at the end of the
/// archived day's retention (35 d).
async fn check_expiries(admin: &mut Admin, prefix: &str, model: &Model, t0: i64) {
    for member in model.due.keys() {
        let key = format!("{prefix}:{member}");
        assert_eq!(admin.pexpiretime(&key).await, -1, "{key} has an expiry");
        if member.starts_with("{lasts") {
            let t = format!("{key}:t");
            assert_eq!(admin.pexpiretime(&t).await, -1, "{t} has an expiry");
        }
    }
    for name in model.boards.keys().filter(|n| n.starts_with("hours/")) {
        let hour = name.trim_start_matches("hours/hour:");
        let start = chrono::NaiveDateTime::parse_from_str(&format!("{hour}:00"), "%Y-%m-%dT%H:%M")
            .expect("hour id")
            .and_utc()
            .timestamp_millis();
        let key = format!("{prefix}:{{hours}}:hour:{hour}");
        assert_eq!(
            admin.pexpiretime(&key).await,
            start + HOUR + 2 * DAY,
            "{key}"
        );
    }
    for tag in ["days", "lasts:s1", "lasts:s2"] {
        let fence = format!("{prefix}:{{{tag}}}:off");
        assert_eq!(
            admin.pexpiretime(&fence).await,
            day_end(t0) + 35 * DAY,
            "{fence} must outlive the archived day's retention"
        );
    }
}

fn events(gifts: &[Gift], from: usize) -> Vec<serde_json::Value> {
    gifts
        .iter()
        .enumerate()
        .map(|(i, g)| g.json(from + i))
        .collect()
}

/// The scenario through the consumer's own batch code and the apply
/// script, on `url` (a single node or a cluster node).
async fn direct_scenario(url: &str, mut admin: Admin) {
    let prefix = unique("rfc");
    let t0 = noon_tomorrow();
    let text = format!("{}{BOARDS}", archive_settings("10m"));
    let mut d = Direct::new(url, &prefix, &text, t0).await;
    let mut model = Model::default();
    let one = phase_one(t0);

    // A registration that fails fails the batch before anything is applied.
    let due_key = format!("{prefix}:archive:due");
    admin
        .q::<()>(redis::cmd("SET").arg(&due_key).arg("x"))
        .await;
    let err = d.try_apply(&events(&one, 0)).await.expect_err("WRONGTYPE");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let nothing = admin.boards(&prefix, &one_names(&one)).await;
    assert!(nothing.values().all(BTreeMap::is_empty), "{nothing:?}");
    admin.q::<()>(redis::cmd("DEL").arg(&due_key)).await;

    // Phase one: yesterday's solo gift is late on arrival, the rest taken.
    for g in &one {
        model.apply(g, t0);
    }
    let (outcomes, report) = d.apply(&events(&one, 100)).await;
    let late_on_arrival = outcomes.iter().filter(|o| **o == Outcome::Late).count();
    assert_eq!(late_on_arrival as u64, model.late);
    assert_eq!(
        d.settle_last(&report),
        vec![
            (Outcome::Applied, model.applied),
            (Outcome::Late, model.late)
        ],
        "late on arrival counts with the batch, as in the consumer"
    );
    assert_eq!((model.applied, model.late), (5, 1));
    assert!(report.late_cutoffs.is_empty(), "nothing late in Redis");
    assert_eq!(admin.boards(&prefix, &model.boards).await, model.boards);
    assert_eq!(admin.due(&prefix).await, model.due);
    assert_eq!(model.due.len(), 3, "{:?}", model.due);
    check_expiries(&mut admin, &prefix, &model, t0).await;

    // The archiver closes today's `days` and `lasts:s1`.
    close(&mut admin, &prefix, &mut model, &["days", "lasts:s1"], t0).await;
    let two = phase_two(t0);
    for g in &two {
        model.apply(g, t0);
    }
    let (outcomes, report) = d.apply(&events(&two, 200)).await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Applied),
        "open by the clock"
    );
    assert_eq!(
        d.settle_last(&report),
        vec![(Outcome::Applied, 2), (Outcome::Late, 2)],
        "the solo gifts to s1 reached only closed views"
    );
    let board = |name: &str| d.boards.boards.iter().position(|b| b.name == name);
    // Updates are merged per member before the script sees them: `days`
    // had s1 and s2, `lasts:s1` had u5, u6 and u2.
    assert_eq!(report.boards[board("days").unwrap()].late, 2);
    assert_eq!(report.boards[board("lasts").unwrap()].late, 3);
    assert_eq!(
        report.boards[board("lasts").unwrap()].applied,
        1,
        "u5 on s2"
    );
    assert!(
        report
            .late_cutoffs
            .values()
            .all(|c| c.as_slice() == [CLOSED_CUTOFF]),
        "{:?}",
        report.late_cutoffs
    );
    assert_eq!(report.late_cutoffs.len(), 2);
    assert_eq!(admin.boards(&prefix, &model.boards).await, model.boards);
    assert_eq!(admin.due(&prefix).await, model.due);
    check_expiries(&mut admin, &prefix, &model, t0).await;

    // The fences moved past the closed views' events too: a redelivery of
    // the batch is skipped whole.
    let again = d.redeliver_last().await;
    assert!(again.conflicts > 0);
    assert!(again.boards.iter().all(|b| b.applied == 0 && b.late == 0));
    assert_eq!(admin.boards(&prefix, &model.boards).await, model.boards);
    println!(
        "verified: {} events ({} applied, {} late); closed views unchanged; {} due entries; archived keys without expiry",
        one.len() + two.len(),
        model.applied,
        model.late,
        model.due.len()
    );
}

/// Every board name phase one can touch, for reading them all.
fn one_names(gifts: &[Gift]) -> Boards {
    let mut m = Model::default();
    for g in gifts {
        m.apply(g, i64::MIN);
    }
    m.boards
}

/// Sets today's `K:closed` of the given tags as the archiver would.
async fn close(admin: &mut Admin, prefix: &str, model: &mut Model, tags: &[&str], t0: i64) {
    for tag in tags {
        let key = format!("{prefix}:{{{tag}}}:{}:closed", day_view(t0));
        admin
            .q::<()>(redis::cmd("SET").arg(key).arg(day_end(t0) + GRACE))
            .await;
        model.markers.insert(format!("{tag}/{}", day_view(t0)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_takes_nothing_from_a_closed_period_on_a_single_node() {
    let redis = Redis::start();
    let admin = Admin::single(&redis).await;
    direct_scenario(&redis.url(), admin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_takes_nothing_from_a_closed_period_on_a_cluster() {
    let cluster = RedisCluster::start();
    let admin = Admin::cluster(&cluster).await;
    direct_scenario(&cluster.nodes[0].url(), admin).await;
}

/// (applied, late) events of `topic`, once at least `events` are counted.
async fn counted(app: &InProcess, topic: &str, events: u64) -> Option<(u64, u64)> {
    let url = app.url("/metrics");
    let applied = events_counted(&url, topic, "applied").await as u64;
    let late = events_counted(&url, topic, "late").await as u64;
    (applied + late >= events).then_some((applied, late))
}

/// Through tansu and the running consumer, with its clock held at noon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_periods_count_late_end_to_end() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, BOARDS);
    setup.extra = archive_settings("10m");
    broker.create_topic(&setup.topic, 2).await;
    let t0 = noon_tomorrow();
    let clock: SharedClock = Arc::new(ManualClock::new(t0));
    let app = InProcess::start(&setup, clock).await;
    let mut admin = Admin::single(&redis).await;
    let producer = broker.producer();
    let mut model = Model::default();

    let one = phase_one(t0);
    for g in &one {
        model.apply(g, t0);
    }
    send_round_robin(&producer, &setup.topic, &events(&one, 0), 2).await;
    wait_boards(&redis, &setup, &model.boards, Duration::from_secs(60)).await;
    let want = (model.applied, model.late);
    let got = wait_steady(Duration::from_secs(20), QUIET, "phase one counts", || {
        counted(&app, &setup.topic, want.0 + want.1)
    })
    .await;
    assert_eq!(got, want, "(applied, late) after phase one");
    assert_eq!(admin.due(&setup.prefix).await, model.due);
    check_expiries(&mut admin, &setup.prefix, &model, t0).await;

    close(
        &mut admin,
        &setup.prefix,
        &mut model,
        &["days", "lasts:s1"],
        t0,
    )
    .await;
    let two = phase_two(t0);
    for g in &two {
        model.apply(g, t0);
    }
    send_round_robin(&producer, &setup.topic, &events(&two, 100), 2).await;
    wait_boards(&redis, &setup, &model.boards, Duration::from_secs(60)).await;
    let want = (model.applied, model.late);
    assert_eq!(want, (7, 3));
    let got = wait_steady(Duration::from_secs(20), QUIET, "phase two counts", || {
        counted(&app, &setup.topic, want.0 + want.1)
    })
    .await;
    assert_eq!(got, want, "(applied, late) after phase two");
    assert_eq!(admin.due(&setup.prefix).await, model.due);
    check_expiries(&mut admin, &setup.prefix, &model, t0).await;
    app.stop().await;
    println!(
        "verified: through tansu, {} applied and {} late (closed by clock and by marker), boards exact, due set exact",
        want.0, want.1
    );
}

/// The mixed reference boards with `star_coins`'s day and `points`'s week
/// archived (a day of grace, so the last two hours of events never close
/// during the test, even around midnight).
fn archived_mixed_boards() -> String {
    let star = "periods = [\"day\", \"all\"]\n";
    let points = "score = \"points\"\nperiods = [\"week\"]\n";
    assert!(MIXED_BOARDS.contains(star) && MIXED_BOARDS.contains(points));
    MIXED_BOARDS
        .replacen(star, &format!("{star}archive = [\"day\"]\n"), 1)
        .replacen(points, &format!("{points}archive = [\"week\"]\n"), 1)
}

/// Close time (end + 1 d) of a reference board name's period, if archived.
fn mixed_close(name: &str) -> Option<(String, i64)> {
    let (tag, view) = name.split_once('/')?;
    let end = match (tag, view.split_once(':')?) {
        ("star_coins", ("day", d)) => chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d")
            .ok()?
            .succ_opt()?,
        ("points", ("week", w)) => {
            let (y, w) = w.split_once("-W")?;
            chrono::NaiveDate::from_isoywd_opt(
                y.parse().ok()?,
                w.parse().ok()?,
                chrono::Weekday::Mon,
            )? + chrono::Days::new(7)
        }
        _ => return None,
    };
    let end = end.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
    Some((format!("{{{tag}}}:{view}"), end + DAY))
}

/// Exactly once with archived views: a consumer `kill -9`ed while events
/// flow and started again; every board exact, the due set exact, archived
/// keys without expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_stream_leaves_archived_boards_exact() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, &archived_mixed_boards());
    setup.extra = archive_settings("1d");
    broker.create_topic(&setup.topic, 4).await;
    let total = 30_000;
    let (messages, expect) = mixed_events(total, 41, 4, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        3_000,
        Duration::from_millis(300),
    );
    let mut a = Process::start(&setup);
    let seen = wait_for(Duration::from_secs(120), "a third applied", || async {
        let n = redis.positions_sum(&setup.prefix).await;
        (n >= (total / 3) as i64).then_some(n)
    })
    .await;
    a.kill9();
    println!("injected: kill -9 after {seen} of {total} messages were applied");
    let b = Process::start(&setup);
    feeder.await.expect("feeder");
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(180), || {
        b.log()
    })
    .await;
    let want: BTreeMap<String, i64> = expect.keys().filter_map(|n| mixed_close(n)).collect();
    let mut admin = Admin::single(&redis).await;
    assert_eq!(admin.due(&setup.prefix).await, want);
    assert!(want.keys().any(|m| m.starts_with("{points}")));
    for member in want.keys() {
        let key = format!("{}:{member}", setup.prefix);
        assert_eq!(admin.pexpiretime(&key).await, -1, "{key} has an expiry");
    }
    let kept = expect
        .keys()
        .filter(|n| n.starts_with("heat/") || n.starts_with("flowers/"));
    for name in kept {
        let (tag, view) = name.split_once('/').expect("tag/view");
        let key = setup.key(tag, view);
        assert!(
            admin.pexpiretime(&key).await > now_ms(),
            "{key} lost its expiry"
        );
    }
    println!(
        "verified: after a kill -9, {} board instances exact, {} due entries, archived keys without expiry",
        expect.len(),
        want.len()
    );
}
