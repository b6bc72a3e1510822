//! A PostgreSQL outage across the close of an archived period (docs/history.md,
//! issue 10): while the archive is down the closed hour's keys stay in
//! Redis with no expiry and `rankflow_archive_pending` shows it; when
//! PostgreSQL returns, the copy completes and equals the reference. Its own
//! test binary, so the process-wide gauges are this test's alone.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::history::{self, BOARDS, HOUR, HOUR_START, MINUTE};
use common::postgres::Postgres;
use common::reference::wait_boards;
use common::*;
use rankflow::clock::{ManualClock, SharedClock};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_outage_across_the_close_loses_nothing() {
    let mut pg = Postgres::start();
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, BOARDS);
    setup.extra = format!(
        "[archive]\nurl = \"{}\"\ngrace = \"1s\"\ninterval_ms = 200\n",
        pg.url()
    );
    broker.create_topic(&setup.topic, 2).await;
    let clock = ManualClock::new(HOUR_START + 55 * MINUTE);
    let shared: SharedClock = Arc::new(clock.clone());
    let app = InProcess::start(&setup, shared).await;

    let (events, expect) = history::hour_of_events(1000, 11, 2);
    feed(
        &broker,
        &setup.topic,
        events,
        250,
        Duration::from_millis(10),
    );
    let all = expect[&("coins".to_string(), String::new())]
        .iter()
        .cloned()
        .collect();
    let boards = std::collections::BTreeMap::from([("coins/all".to_string(), all)]);
    wait_boards(&redis, &setup, &boards, Duration::from_secs(90)).await;

    pg.stop();
    clock.set(HOUR_START + 60 * MINUTE + 2_000);
    let metrics = app.url("/metrics");
    let pending = wait_for(
        Duration::from_secs(30),
        "the closed hour pending",
        || async {
            let text = get_text(&metrics).await?;
            let n = metric_sum(&text, "rankflow_archive_pending", &[]);
            (n >= expect.len() as f64).then_some(n)
        },
    )
    .await;
    println!("PostgreSQL down after the close: rankflow_archive_pending = {pending}");
    let hour_keys = redis.keys(&format!("{}:*:hour:{HOUR}", setup.prefix)).await;
    assert_eq!(
        hour_keys.len(),
        expect.len(),
        "one hour key per board instance: {hour_keys:?}"
    );
    assert_holds(
        Duration::from_secs(5),
        "keys kept with no expiry while the archive is down",
        || async {
            match hour_keys
                .iter()
                .find(|k| redis.cli(&["PTTL", k]).trim() != "-1")
            {
                None => Ok(()),
                Some(k) => Err(format!("{k} has PTTL {}", redis.cli(&["PTTL", k]))),
            }
        },
    )
    .await;
    let errors = metric_sum(
        &get_text(&metrics).await.unwrap_or_default(),
        "rankflow_archive_errors_total",
        &[],
    );
    assert!(errors >= 1.0, "the failed attempts are counted: {errors}");

    pg.start_server();
    let pg_client = history::connect(&pg.url()).await;
    wait_for(
        Duration::from_secs(60),
        "the hour archived once PostgreSQL is back",
        || async {
            (history::completed(&pg_client, HOUR).await.len() == expect.len()).then_some(())
        },
    )
    .await;
    for ((board, scope), standings) in &expect {
        let rows = history::archived(&pg_client, board, scope, HOUR).await;
        assert_eq!(
            &rows, standings,
            "archived {board}/{scope} equals the reference"
        );
    }
    wait_for(Duration::from_secs(20), "nothing pending", || async {
        let text = get_text(&metrics).await?;
        (metric_sum(&text, "rankflow_archive_pending", &[]) == 0.0).then_some(())
    })
    .await;
    println!(
        "after {errors} failed attempts, {} board instances archived equal to the reference; pending back to 0",
        expect.len()
    );
    app.stop().await;
}
