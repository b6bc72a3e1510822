//! The SQL of docs/history.md runs: a private PostgreSQL with rankflow's
//! archive schema (its own migrations, as `rankflow run` applies them), a
//! small hand-made archive of two weeks of `user_points` and one day of the
//! scoped `star_fans`, every ```sql block of the page executed, and the
//! results of the main examples compared with values computed by hand from
//! that dataset.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::postgres::Postgres;
use rankflow::archive::schema;
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// The dataset: (board, scope, view, period, start, end, [(member, score)]
/// in rank order). Ranks are the position in each list.
type Period = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const DATASET: &[Period] = &[
    (
        "user_points",
        "",
        "week",
        "2026-W46",
        "2026-11-09T00:00:00Z",
        "2026-11-16T00:00:00Z",
        &[("u1", "900"), ("u42", "750"), ("u2", "500"), ("u3", "120")],
    ),
    (
        "user_points",
        "",
        "week",
        "2026-W47",
        "2026-11-16T00:00:00Z",
        "2026-11-23T00:00:00Z",
        &[
            ("u2", "1200"),
            ("u5", "1100"),
            ("u1", "800"),
            ("u42", "700"),
            ("u3", "650"),
            ("u6", "90"),
        ],
    ),
    (
        "star_fans",
        "s1",
        "day",
        "2026-11-20",
        "2026-11-20T00:00:00Z",
        "2026-11-21T00:00:00Z",
        &[("u42", "30"), ("u7", "12")],
    ),
    (
        "star_fans",
        "s2",
        "day",
        "2026-11-20",
        "2026-11-20T00:00:00Z",
        "2026-11-21T00:00:00Z",
        &[("u8", "50")],
    ),
];

/// The ```sql blocks of the page, in order.
fn sql_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sql") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unterminated ```sql block");
    blocks
}

/// The block's title: its first `-- ` comment line.
fn title(block: &str) -> &str {
    block
        .lines()
        .find_map(|l| l.trim().strip_prefix("-- "))
        .unwrap_or("(untitled)")
}

/// Rows of each statement of a simple-protocol query, as text.
fn statements(messages: &[SimpleQueryMessage]) -> Vec<Vec<Vec<String>>> {
    let mut out = Vec::new();
    let mut rows = Vec::new();
    for m in messages {
        match m {
            SimpleQueryMessage::Row(row) => rows.push(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            SimpleQueryMessage::CommandComplete(_) => out.push(std::mem::take(&mut rows)),
            _ => {}
        }
    }
    out
}

fn row(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sql_example_of_the_history_docs_runs_and_the_main_ones_give_the_hand_computed_results()
 {
    let pg = Postgres::start();
    let (mut client, connection) = tokio_postgres::connect(&pg.url(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let found = schema::migrate(&mut client)
        .await
        .expect("migrations apply");
    assert_eq!(found, 0, "a fresh database");
    let files =
        std::fs::read_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/archive/sql"))
            .expect("src/archive/sql")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
            })
            .count();
    assert_eq!(
        usize::try_from(schema::latest()).expect("version"),
        files,
        "every src/archive/sql file is a registered migration"
    );

    let mut rows = 0;
    for (board, scope, view, period, start, end, members) in DATASET {
        client
            .execute(
                "INSERT INTO rankflow_archived_periods
                     (board, scope, view, period, period_start, period_end, members)
                 VALUES ($1, $2, $3, $4, $5::text::timestamptz, $6::text::timestamptz, $7)",
                &[
                    board,
                    scope,
                    view,
                    period,
                    start,
                    end,
                    &(members.len() as i64),
                ],
            )
            .await
            .expect("insert period");
        for (i, (member, score)) in members.iter().enumerate() {
            client
                .execute(
                    "INSERT INTO rankflow_archive (board, scope, view, period, rank, member, score)
                     VALUES ($1, $2, $3, $4, $5, $6, $7::text::numeric)",
                    &[board, scope, view, period, &(i as i64 + 1), member, score],
                )
                .await
                .expect("insert member");
            rows += 1;
        }
    }
    println!(
        "dataset: {} periods, {rows} member rows, schema version {}",
        DATASET.len(),
        schema::latest()
    );

    let page =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/history.md"))
            .expect("docs/history.md");
    let blocks = sql_blocks(&page);
    assert!(blocks.len() >= 8, "{} sql blocks", blocks.len());
    let mut results: BTreeMap<String, Vec<Vec<Vec<String>>>> = BTreeMap::new();
    for block in &blocks {
        let messages = client.simple_query(block).await.unwrap_or_else(|e| {
            let detail = e.as_db_error().map_or_else(
                || e.to_string(),
                |d| format!("{} (SQLSTATE {})", d.message(), d.code().code()),
            );
            panic!("the example \"{}\" fails: {detail}\n{block}", title(block))
        });
        let previous = results.insert(title(block).to_string(), statements(&messages));
        assert!(
            previous.is_none(),
            "two examples titled \"{}\"",
            title(block)
        );
    }
    let result = |title: &str| -> &Vec<Vec<String>> {
        &results
            .get(title)
            .unwrap_or_else(|| panic!("no example titled \"{title}\""))[0]
    };

    // Hand-computed from DATASET.
    assert_eq!(
        result("A period's top 10"),
        &vec![
            row(&["1", "u2", "1200"]),
            row(&["2", "u5", "1100"]),
            row(&["3", "u1", "800"]),
            row(&["4", "u42", "700"]),
            row(&["5", "u3", "650"]),
            row(&["6", "u6", "90"]),
        ]
    );
    assert_eq!(
        result("The winner of every week"),
        &vec![
            row(&["2026-W46", "u1", "900"]),
            row(&["2026-W47", "u2", "1200"])
        ]
    );
    let history: Vec<Vec<&str>> = result("A member's history across weeks")
        .iter()
        .map(|r| vec![r[0].as_str(), r[2].as_str(), r[3].as_str(), r[4].as_str()])
        .collect();
    assert_eq!(
        history,
        vec![
            vec!["2026-W46", "2", "4", "750"],
            vec!["2026-W47", "4", "6", "700"]
        ]
    );
    let around: Vec<(&str, &str, &str)> = result("A member's rank in a period and its neighbours")
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[3].as_str()))
        .collect();
    assert_eq!(
        around,
        vec![
            ("2", "u5", "f"),
            ("3", "u1", "f"),
            ("4", "u42", "t"),
            ("5", "u3", "f"),
            ("6", "u6", "f")
        ]
    );
    // u2 3→1 (+2), u3 4→5 (-1), u1 1→3 (-2, rank 3), u42 2→4 (-2, rank 4);
    // u5 and u6 are new in W47 and not movers.
    assert_eq!(
        result("Week-over-week movers"),
        &vec![
            row(&["u2", "3", "1", "2", "700"]),
            row(&["u3", "4", "5", "-1", "530"]),
            row(&["u1", "1", "3", "-2", "-100"]),
            row(&["u42", "2", "4", "-2", "-50"]),
        ]
    );
    // W46: 900+750+500+120 = 2270, mean 567.50; W47: 4540, mean 756.67.
    assert_eq!(
        result("Comparing two periods: totals"),
        &vec![
            row(&["2026-W46", "4", "2270", "900", "567.50"]),
            row(&["2026-W47", "6", "4540", "1200", "756.67"]),
        ]
    );
    // Member by member, by change: u5 +1100 (new), u2 +700, u3 +530,
    // u6 +90 (new), u42 -50, u1 -100.
    let by_member: Vec<(&str, &str)> = results["Comparing two periods: totals"][1]
        .iter()
        .map(|r| (r[0].as_str(), r[5].as_str()))
        .collect();
    assert_eq!(
        by_member,
        vec![
            ("u5", "1100"),
            ("u2", "700"),
            ("u3", "530"),
            ("u6", "90"),
            ("u42", "-50"),
            ("u1", "-100")
        ]
    );
    let scoped = &results["Scoped boards: one scope value, and the top of every scope value"];
    assert_eq!(
        scoped[1],
        vec![row(&["s2", "u8", "50"]), row(&["s1", "u42", "30"])]
    );
    println!(
        "verified: {} sql blocks of docs/history.md ran; 8 results equal the hand-computed ones",
        blocks.len()
    );
}
