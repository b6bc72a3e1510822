//! Shared pieces of the end-to-end history tests (docs/history.md): archived
//! boards over one hour of events, their final standings computed the plain
//! way (a sort by the board's order, written here from docs/history.md, not taken
//! from rankflow), and reads of the archive tables.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

/// 2026-06-10T12:00:00Z: the hour every event of these tests falls in.
pub const HOUR_START: i64 = 1_781_092_800_000;
pub const HOUR: &str = "2026-06-10T12";
pub const MINUTE: i64 = 60_000;

/// A plain sum, a scoped sum and a max with the earliest-first tie-break,
/// each archiving its hours.
pub const BOARDS: &str = r#"
[[board]]
name = "coins"
event = "gift"
member = "receiver_id"
score = "count * value"
periods = ["hour", "all"]
archive = ["hour"]

[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["hour"]
archive = ["hour"]

[[board]]
name = "best"
event = "score"
member = "user_id"
score = "points"
aggregate = "max"
tie_break = "earliest"
periods = ["hour"]
archive = ["hour"]
"#;

/// Final standings of one board instance, in rank order: (member, score).
pub type Standings = Vec<(String, f64)>;

/// `(board, scope)` → standings.
pub type Expected = BTreeMap<(String, String), Standings>;

/// Per member: value and the event time the tie-break looks at.
#[derive(Default)]
struct Acc(BTreeMap<String, (f64, i64)>);

impl Acc {
    fn sum(&mut self, m: &str, v: f64) {
        self.0.entry(m.to_string()).or_insert((0.0, 0)).0 += v;
    }

    /// `max` keeps the best value and, among equal ones, the earliest time
    /// it was reached.
    fn max(&mut self, m: &str, v: f64, ts: i64) {
        let e = self.0.entry(m.to_string()).or_insert((v, ts));
        if v > e.0 || (v == e.0 && ts < e.1) {
            *e = (v, ts);
        }
    }

    /// Rank order: value descending; then, with a tie-break, the earlier
    /// time first; then the member descending (Redis's reverse order among
    /// equal scores).
    fn ranked(self, tie: bool) -> Standings {
        let mut v: Vec<(String, (f64, i64))> = self.0.into_iter().collect();
        v.sort_by(|(ma, (a, ta)), (mb, (b, tb))| {
            b.partial_cmp(a)
                .expect("finite")
                .then(if tie {
                    ta.cmp(tb)
                } else {
                    std::cmp::Ordering::Equal
                })
                .then(mb.cmp(ma))
        });
        v.into_iter().map(|(m, (s, _))| (m, s)).collect()
    }
}

/// `n` events inside the hour (distinct times, spread over its first 50
/// minutes), on random partitions, and the standings they must leave.
pub fn hour_of_events(n: usize, seed: u64, partitions: i32) -> (Vec<(i32, Vec<u8>)>, Expected) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut coins = Acc::default();
    let mut fans: BTreeMap<String, Acc> = BTreeMap::new();
    let mut best = Acc::default();
    let mut out = Vec::new();
    let step = 50 * MINUTE / n as i64;
    for i in 0..n {
        let ts = HOUR_START + i as i64 * step;
        let event = if i % 2 == 0 {
            let sender = format!("u{}", rng.random_range(0..30));
            let receiver = format!("s{}", rng.random_range(0..4));
            let count = rng.random_range(1..10i64);
            let value = [0.5, 1.0, 2.0, 5.0][rng.random_range(0..4)];
            coins.sum(&receiver, count as f64 * value);
            fans.entry(receiver.clone())
                .or_default()
                .sum(&sender, count as f64);
            json!({"type": "gift", "event_id": format!("g{i}"), "ts": ts, "sender_id": sender,
                   "receiver_id": receiver, "gift_id": "rose", "count": count, "value": value})
        } else {
            let user = format!("p{}", rng.random_range(0..40));
            let points = [10i64, 20, 30][rng.random_range(0..3)];
            best.max(&user, points as f64, ts);
            json!({"type": "score", "event_id": format!("s{i}"), "ts": ts, "user_id": user,
                   "game_id": "g1", "points": points})
        };
        out.push((
            rng.random_range(0..partitions),
            event.to_string().into_bytes(),
        ));
    }
    let mut expect = Expected::new();
    expect.insert(("coins".into(), String::new()), coins.ranked(false));
    expect.insert(("best".into(), String::new()), best.ranked(true));
    for (scope, acc) in fans {
        expect.insert(("fans".into(), scope), acc.ranked(false));
    }
    (out, expect)
}

/// The archived standings of one period, in rank order, with the ranks
/// checked to be 1..=n.
pub async fn archived(
    pg: &tokio_postgres::Client,
    board: &str,
    scope: &str,
    period: &str,
) -> Standings {
    let rows = pg
        .query(
            "SELECT rank, member, score::text FROM rankflow_archive
              WHERE board = $1 AND scope = $2 AND view = 'hour' AND period = $3
              ORDER BY rank",
            &[&board, &scope, &period],
        )
        .await
        .expect("archive query");
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let rank: i64 = r.get(0);
            assert_eq!(rank, i as i64 + 1, "ranks of {board}/{scope} run 1..=n");
            let score: String = r.get(2);
            (r.get(1), score.parse::<f64>().expect("numeric score"))
        })
        .collect()
}

/// Completed copies: `(board, scope)` → members, for one hour.
pub async fn completed(
    pg: &tokio_postgres::Client,
    period: &str,
) -> BTreeMap<(String, String), i64> {
    match pg
        .query(
            "SELECT board, scope, members FROM rankflow_archived_periods
              WHERE view = 'hour' AND period = $1",
            &[&period],
        )
        .await
    {
        Ok(rows) => rows
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2)))
            .collect(),
        // The schema is created by rankflow: not there yet.
        Err(_) => BTreeMap::new(),
    }
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(conn);
    client
}
