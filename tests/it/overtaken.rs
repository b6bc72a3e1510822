//! Who passed a followed member (docs/http-api.md, "Live views"; issue 28
//! point 7): a member stream's `"overtaken_by"` and `"overtaken_by_count"`
//! against expectations written out by hand, as a user would check them.
//!
//! - Near the top the member's whole list of members ahead is known at each
//!   event, so it knows exactly who passed it: a new member that lands
//!   ahead of it is named, and so is one that came from far behind.
//! - Deeper down it names those it saw pass (its neighbourhood) and counts
//!   every one the ranks show, a newcomer from nowhere included.
//!
//! Boards are written with plain Redis commands (docs/redis-layout.md), the
//! API served from `api::router` as `rankflow run` wires it.

use crate::common;

use std::time::Duration;

use common::direct::ServedApi;
use common::sse::{Ev, Stream};
use serde_json::{Value, json};

/// 2026-11-21T12:00:00Z.
const NOW: i64 = 1_795_262_400_000;

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
"#;

struct Api(ServedApi);

impl std::ops::Deref for Api {
    type Target = ServedApi;
    fn deref(&self) -> &ServedApi {
        &self.0
    }
}

impl Api {
    async fn start() -> Api {
        Api(ServedApi::start("ovt", BOARDS, NOW).await)
    }

    /// The `all` key of board `points`.
    fn key(&self) -> String {
        format!("{}:{{points}}:all", self.prefix)
    }

    async fn zadd(&self, entries: &[(i64, &str)]) {
        let mut c = self.redis.conn().await;
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(self.key());
        for (score, member) in entries {
            zadd.arg(*score).arg(*member);
        }
        let _: u64 = zadd.query_async(&mut c).await.expect("ZADD");
    }

    async fn follow(&self, member: &str) -> Stream {
        let url = format!("{}/v1/boards/points/all/members/{member}/stream", self.base);
        Stream::open(&url, None).await
    }
}

async fn next(s: &mut Stream, what: &str) -> Ev {
    s.event(Duration::from_secs(10), what).await
}

/// Events and the JSON each should be, checked as they come for what a
/// user reads first (the rank and who passed whom), and whole at the end.
#[derive(Default)]
struct Expected(Vec<(Ev, Value)>);

impl Expected {
    fn check(&mut self, e: &Ev, want: Value) {
        let part = |v: &Value| {
            ["rank", "overtaken_by", "overtook"].map(|k| v.get(k).cloned().unwrap_or(Value::Null))
        };
        assert_eq!(part(&e.data), part(&want), "{}", e.data);
        self.0.push((e.clone(), want));
    }

    fn whole(self) {
        for (e, want) in self.0 {
            assert_eq!(e.data, want);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_top_a_newcomer_that_passes_a_member_is_named() {
    let api = Api::start().await;
    // Twenty members; m3 is fifth.
    let order = [
        "m1", "m2", "m4", "m5", "m3", "m6", "m7", "m8", "m9", "m10", "m11", "m12", "m13", "m14",
        "m15", "m16", "m17", "m18", "m19", "m20",
    ];
    let scores = [
        120, 110, 90, 85, 80, 75, 70, 65, 60, 55, 50, 45, 40, 35, 30, 25, 20, 15, 10, 5,
    ];
    let board: Vec<(i64, &str)> = scores.iter().copied().zip(order).collect();
    api.zadd(&board).await;
    let mut m3 = api.follow("m3").await;
    let mut expected = Expected::default();
    let first = next(&mut m3, "m3 at connect").await;
    expected.check(
        &first,
        json!({"rank": 5, "member": "m3", "score": 80, "source": "live", "period": null,
               "overtaken_by": [], "overtaken_by_count": 0, "overtook": []}),
    );

    // A new member scores 99: third. m3 is sixth, and knows who passed it.
    api.zadd(&[(99, "newbie")]).await;
    let passed = next(&mut m3, "m3 passed by a newcomer").await;
    expected.check(
        &passed,
        json!({"rank": 6, "member": "m3", "score": 80, "source": "live", "period": null,
               "overtaken_by": ["newbie"], "overtaken_by_count": 1, "overtook": []}),
    );

    // m20, last (15 ranks behind m3, out of its neighbourhood), jumps to
    // 95: named too, since m3 knew everyone ahead of it.
    api.zadd(&[(95, "m20")]).await;
    let jumped = next(&mut m3, "m3 passed from far behind").await;
    expected.check(
        &jumped,
        json!({"rank": 7, "member": "m3", "score": 80, "source": "live", "period": null,
               "overtaken_by": ["m20"], "overtaken_by_count": 1, "overtook": []}),
    );
    assert!(jumped.id > passed.id && passed.id > first.id);
    expected.whole();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeper_down_a_member_names_what_it_saw_and_counts_every_pass() {
    let api = Api::start().await;
    // 150 members d001 (1500) ... d150 (10): d120 is 120th, with 119
    // members ahead, more than its stream follows by name.
    let names: Vec<String> = (1..=150).map(|i| format!("d{i:03}")).collect();
    let board: Vec<(i64, &str)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (1500 - 10 * i as i64, n.as_str()))
        .collect();
    api.zadd(&board).await;
    let mut d120 = api.follow("d120").await;
    let mut expected = Expected::default();
    let first = next(&mut d120, "d120 at connect").await;
    expected.check(
        &first,
        json!({"rank": 120, "member": "d120", "score": 310, "source": "live", "period": null,
               "overtaken_by": [], "overtaken_by_count": 0, "overtook": []}),
    );

    // Two members pass it at once: a newcomer straight to the top (never
    // seen by d120's stream, so counted but not named) and d121, right
    // behind it, to 315, just ahead of it (seen passing).
    api.zadd(&[(9999, "rocket"), (315, "d121")]).await;
    let passed = next(&mut d120, "d120 passed twice").await;
    expected.check(
        &passed,
        json!({"rank": 122, "member": "d120", "score": 310, "source": "live", "period": null,
               "overtaken_by": ["d121"], "overtaken_by_count": 2, "overtook": []}),
    );

    // d120 climbs to 335, past d121, d119 and d118 (its neighbours ahead):
    // rocket and d001 ... d117 are ahead, it is 119th; it overtook them, in
    // their new order, and nobody passed it.
    api.zadd(&[(335, "d120")]).await;
    let climbed = next(&mut d120, "d120 climbs").await;
    expected.check(
        &climbed,
        json!({"rank": 119, "member": "d120", "score": 335, "source": "live", "period": null,
               "overtaken_by": [], "overtaken_by_count": 0,
               "overtook": ["d118", "d119", "d121"]}),
    );
    expected.whole();
}
