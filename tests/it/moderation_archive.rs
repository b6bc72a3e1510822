//! Hide, restore and erase in the PostgreSQL archive (docs/moderation.md),
//! against hand-made tables: a member hidden before its period is archived
//! is archived hidden (from the view's twin, at its place in the order);
//! one hidden after is marked; reads leave hidden rows out and close the
//! others' ranks up in every style (ties included, a wholly hidden tie
//! group taking a dense rank off); a restore gives the rows back as
//! archived; an erasure deletes the member's rows and the others keep
//! their ranks. A second test races copies of a period against actions on
//! its members: no copy is committed with a member missing or doubled,
//! and the hidden marks end as the record says.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::direct::Direct;
use common::postgres::Postgres;
use common::*;
use rankflow::admin::{ActionRequest, MemberAction, Moderator};
use rankflow::archive::connect::Target;
use rankflow::archive::copy::{Archive, PeriodKey};
use rankflow::archive::due::{self, DueItem};
use rankflow::archive::read::ArchiveReader;
use rankflow::archive::runner::{Archiver, Outcome};
use rankflow::board::keys;
use rankflow::clock::SharedClock;
use rankflow::config::Config;
use serde_json::{Value, json};

/// 2026-11-20T12:00:00Z, the day whose standings are archived.
const DAY_NOON: i64 = 1_795_176_000_000;
const DAY: &str = "2026-11-20";
const H: i64 = 3_600_000;

fn boards(pg_url: &str) -> String {
    format!(
        r#"
[archive]
url = "{pg_url}"
grace = "10m"
chunk = 2

[[board]]
name = "gifts"
event = "score"
member = "user_id"
score = "points"
periods = ["day"]
archive = ["day"]
"#
    )
}

fn event(id: &str, user: &str, points: i64) -> Value {
    json!({"type": "score", "event_id": id, "ts": DAY_NOON, "user_id": user, "game_id": "g1", "points": points})
}

/// The standings of the day, stored order (`ZREVRANGE`: score, then
/// member bytes descending): b a x y c d.
const SCORES: [(&str, i64); 6] = [
    ("a", 50),
    ("b", 50),
    ("x", 45),
    ("c", 40),
    ("y", 40),
    ("d", 30),
];

/// (member, ordinal, competition, dense) as a read shows them.
type Shown = (&'static str, u64, u64, u64);

/// Every member visible, by hand.
const ALL: [Shown; 6] = [
    ("b", 1, 1, 1),
    ("a", 2, 1, 1),
    ("x", 3, 3, 2),
    ("y", 4, 4, 3),
    ("c", 5, 4, 3),
    ("d", 6, 6, 4),
];
/// `x` hidden: its tie group (45) is gone, so dense ranks below drop by 1.
const X_HIDDEN: [Shown; 5] = [
    ("b", 1, 1, 1),
    ("a", 2, 1, 1),
    ("y", 3, 3, 2),
    ("c", 4, 3, 2),
    ("d", 5, 5, 3),
];
/// `x` and `y` hidden: `c` still holds the 40 group.
const XY_HIDDEN: [Shown; 4] = [
    ("b", 1, 1, 1),
    ("a", 2, 1, 1),
    ("c", 3, 3, 2),
    ("d", 4, 4, 3),
];
/// `y` hidden alone.
const Y_HIDDEN: [Shown; 5] = [
    ("b", 1, 1, 1),
    ("a", 2, 1, 1),
    ("x", 3, 3, 2),
    ("c", 4, 4, 3),
    ("d", 5, 5, 4),
];
/// `c` erased with nobody hidden: the others keep the ranks the period
/// was archived with.
const C_ERASED: [Shown; 5] = [
    ("b", 1, 1, 1),
    ("a", 2, 1, 1),
    ("x", 3, 3, 2),
    ("y", 4, 4, 3),
    ("d", 6, 6, 4),
];

struct Env {
    _redis: Redis,
    _pg: Postgres,
    direct: Direct,
    reader: ArchiveReader,
    moderator: Moderator,
    config: Config,
    pg_url: String,
    prefix: String,
}

async fn env() -> Env {
    let redis = Redis::start();
    let pg = Postgres::start();
    let prefix = unique("marc");
    let text = boards(&pg.url());
    let mut direct = Direct::new(&redis.url(), &prefix, &text, DAY_NOON)
        .await
        .with_erase_key("archive-test-key");
    let events: Vec<Value> = SCORES
        .iter()
        .map(|(m, p)| event(&format!("e-{m}"), m, *p))
        .collect();
    direct.apply(&events).await;
    // Two days on: the day is closed and due.
    direct.clock.set(DAY_NOON + 48 * H);
    let config_text = format!(
        "{text}\n[kafka]\nbrokers = \"unused:9092\"\ntopics = [\"t\"]\n[redis]\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\n[admin]\nerase_key = \"archive-test-key\"\n",
        redis.url()
    );
    let config = Config::from_toml(&config_text, std::path::Path::new("t.toml"), Vec::new())
        .expect("config");
    let moderator = direct
        .moderator()
        .with_archive(Some(Target::new(&pg.url(), None).expect("url")));
    Env {
        reader: ArchiveReader::new(&pg.url()).expect("reader"),
        pg_url: pg.url(),
        _redis: redis,
        _pg: pg,
        direct,
        moderator,
        config,
        prefix,
    }
}

impl Env {
    fn key(&self) -> PeriodKey {
        PeriodKey {
            board: "gifts".into(),
            scope: String::new(),
            view: "day".into(),
            period: DAY.into(),
        }
    }

    async fn archiver(&self) -> Archiver {
        let clock: SharedClock = Arc::new(self.direct.clock.clone());
        rankflow::app::archiver(&self.config, clock)
            .await
            .expect("archiver")
    }

    /// The archiver's steps on the day (again, with `replace`).
    async fn archive(&self, archiver: &mut Archiver, replace: bool) -> Outcome {
        let set = self.config.compile_boards().expect("boards");
        let item = DueItem {
            member: keys::due_member("gifts", &format!("day:{DAY}")),
            close_ms: DAY_NOON + 12 * H + 600_000,
        };
        let period = due::resolve(&set, &self.prefix, &item).expect("resolves");
        archiver.process(&period, replace).await
    }

    async fn act(&self, action: MemberAction, member: &str) {
        let req = ActionRequest {
            member: member.to_string(),
            boards: None,
            reason: None,
        };
        self.moderator
            .act(action, &req, "test")
            .await
            .unwrap_or_else(|e| panic!("{action:?} {member}: {e}"));
    }

    /// What every read of the archived day shows, checked against `want`:
    /// the page in each style, each member alone (hidden and erased ones
    /// not found), the members list, "around" each shown member, and the
    /// member count.
    async fn check(&self, want: &[Shown], label: &str) {
        let key = self.key();
        for (style, pick) in [("ordinal", 1usize), ("competition", 2), ("dense", 3)] {
            let rank = |s: &Shown| [s.1, s.2, s.3][pick - 1];
            let page = self
                .reader
                .page_ranked(&key, 1, 10, style)
                .await
                .expect("page")
                .expect("archived");
            let got: Vec<(String, u64)> = page
                .rows
                .iter()
                .map(|r| (r.member.clone(), r.rank))
                .collect();
            let expected: Vec<(String, u64)> =
                want.iter().map(|s| (s.0.to_string(), rank(s))).collect();
            assert_eq!(got, expected, "{label}: page in {style} ranks");
            assert_eq!(page.period.members, want.len() as u64, "{label}: members");
            let ids: Vec<String> = SCORES.iter().map(|(m, _)| m.to_string()).collect();
            let list = self
                .reader
                .members(&key, &ids, style)
                .await
                .expect("members")
                .expect("archived");
            let got: Vec<(String, u64)> = list
                .rows
                .iter()
                .map(|r| (r.member.clone(), r.rank))
                .collect();
            assert_eq!(got, expected, "{label}: members list in {style} ranks");
        }
        // Pages that start past a hidden row.
        let tail = self
            .reader
            .page(&key, 2, 3)
            .await
            .expect("page")
            .expect("archived");
        let got: Vec<(String, u64)> = tail
            .rows
            .iter()
            .map(|r| (r.member.clone(), r.rank))
            .collect();
        let expected: Vec<(String, u64)> = want
            .iter()
            .filter(|s| (2..=3).contains(&s.1))
            .map(|s| (s.0.to_string(), s.1))
            .collect();
        assert_eq!(got, expected, "{label}: ordinal page 2..=3");
        for (member, _) in SCORES {
            let shown = want.iter().find(|s| s.0 == member);
            let one = self
                .reader
                .member(&key, member)
                .await
                .expect("member")
                .expect("archived");
            assert_eq!(one.found, shown.is_some(), "{label}: {member} found");
            if let Some(s) = shown {
                assert_eq!(one.rows[0].rank, s.1, "{label}: {member}'s rank");
            }
            let around = self
                .reader
                .around(&key, member, 1)
                .await
                .expect("around")
                .expect("archived");
            assert_eq!(around.found, shown.is_some(), "{label}: around {member}");
            if let Some(s) = shown {
                let got: Vec<(String, u64)> = around
                    .rows
                    .iter()
                    .map(|r| (r.member.clone(), r.rank))
                    .collect();
                let expected: Vec<(String, u64)> = want
                    .iter()
                    .filter(|o| o.1 + 1 >= s.1 && o.1 <= s.1 + 1)
                    .map(|o| (o.0.to_string(), o.1))
                    .collect();
                assert_eq!(got, expected, "{label}: around {member}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_restored_and_erased_members_in_the_archive_match_the_hand_made_tables() {
    let env = env().await;
    // Hidden before the copy: archived from the twin, marked.
    env.act(MemberAction::Hide, "x").await;
    let mut archiver = env.archiver().await;
    match env.archive(&mut archiver, false).await {
        Outcome::Archived { members, .. } => assert_eq!(members, 6, "x archived too, hidden"),
        other => panic!("not archived: {other:?}"),
    }
    env.check(&X_HIDDEN, "x hidden before the copy").await;
    let state = env.moderator.show("x").await.expect("show");
    let held = serde_json::to_value(&state).expect("json");
    assert_eq!(
        held["archive"]["gifts"],
        json!({"periods": 1, "hidden": 1}),
        "{held}"
    );

    // Hidden after the copy: marked in place.
    env.act(MemberAction::Hide, "y").await;
    env.check(&XY_HIDDEN, "x and y hidden").await;
    // Restored: x comes back at its place in the archive.
    env.act(MemberAction::Restore, "x").await;
    env.check(&Y_HIDDEN, "y hidden").await;
    env.act(MemberAction::Restore, "y").await;
    env.check(&ALL, "all restored").await;
    // Repeating is harmless.
    env.act(MemberAction::Restore, "y").await;
    env.check(&ALL, "restore repeated").await;
    // A copy made again from Redis (rankflow archive --period) agrees.
    env.act(MemberAction::Hide, "x").await;
    assert!(matches!(
        env.archive(&mut archiver, true).await,
        Outcome::Archived { members: 6, .. }
    ));
    env.check(&X_HIDDEN, "x hidden, copied again").await;
    env.act(MemberAction::Restore, "x").await;

    // Erased: the rows go, the others keep their ranks. A row of a board
    // no longer configured goes too.
    let mut a = Archive::connect(&env.pg_url).await.expect("pg");
    a.client()
        .execute(
            "INSERT INTO rankflow_archive (board, scope, view, period, rank, member, score)
             VALUES ('retired', '', 'day', '2026-01-01', 1, 'c', 9)",
            &[],
        )
        .await
        .expect("a retired board's row");
    env.act(MemberAction::Erase, "c").await;
    env.check(&C_ERASED, "c erased").await;
    let left: i64 = a
        .client()
        .query_one(
            "SELECT count(*) FROM rankflow_archive WHERE member = 'c' OR member LIKE '%c%'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 0, "no row names c");
    // An erased hidden member: its mark goes with it, and the 30 group is
    // whole again.
    env.act(MemberAction::Hide, "d").await;
    env.act(MemberAction::Erase, "d").await;
    let without_d: Vec<Shown> = C_ERASED.iter().copied().filter(|s| s.0 != "d").collect();
    env.check(&without_d, "c and d erased").await;
    println!(
        "verified: archived reads of 6 members through hide before and after the copy, restore, a copy again, and 2 erasures"
    );
}

/// Copies of the day run again and again (2 members per chunk, so a copy
/// takes several reads) while another task hides and restores members:
/// every committed copy has each member exactly once with ranks 1..=N,
/// copies that crossed an action were not committed, and once the actions
/// stop the archive's hidden marks are the members the record hides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_racing_member_actions_never_commit_a_member_missing_or_doubled() {
    let env = Arc::new(env().await);
    let mut archiver = env.archiver().await;
    let acting = {
        let env = env.clone();
        tokio::spawn(async move {
            let members = ["a", "x", "d", "y"];
            let mut hidden = BTreeSet::new();
            for round in 0..26 {
                let m = members[round % members.len()];
                let action = if hidden.insert(m) {
                    MemberAction::Hide
                } else {
                    hidden.remove(m);
                    MemberAction::Restore
                };
                env.act(action, m).await;
                tokio::time::sleep(std::time::Duration::from_millis(15)).await;
            }
            hidden
        })
    };
    let mut a = Archive::connect(&env.pg_url).await.expect("pg");
    let (mut committed, mut refused) = (0, 0);
    while !acting.is_finished() {
        match env.archive(&mut archiver, true).await {
            Outcome::Archived { members, .. } => {
                assert_eq!(members, 6);
                committed += 1;
                let row = a
                    .client()
                    .query_one(
                        "SELECT count(*), count(DISTINCT member), min(rank), max(rank)
                           FROM rankflow_archive WHERE board = 'gifts' AND period = $1",
                        &[&DAY],
                    )
                    .await
                    .expect("counts");
                let got: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
                assert_eq!(got, (6, 6, 1, 6), "a committed copy");
            }
            Outcome::Busy => refused += 1,
            other => panic!("copy: {other:?}"),
        }
    }
    let hidden = acting.await.expect("actions");
    let marked: BTreeSet<String> = a
        .client()
        .query(
            "SELECT member FROM rankflow_archive WHERE board = 'gifts' AND hidden",
            &[],
        )
        .await
        .expect("hidden rows")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let want: BTreeSet<String> = hidden.iter().map(|m| m.to_string()).collect();
    assert_eq!(marked, want, "the archive hides what the record hides");
    assert!(committed > 0, "some copy committed");
    println!(
        "verified: {committed} copies committed whole and {refused} refused while 26 actions ran; hidden at the end: {want:?}"
    );
}
