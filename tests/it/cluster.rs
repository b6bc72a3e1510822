//! The end-to-end and exactly-once scenarios against a real local Redis
//! Cluster of three primaries (three `redis-server --cluster-enabled yes`
//! joined by `redis-cli --cluster create`): every board instance lives in one
//! slot, calls are grouped per slot and routed per node, and a slot holding a
//! board is resharded to another node while events flow.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::reference::*;
use common::*;
use rankflow::clock::{SharedClock, SystemClock};

/// Runs `events` mixed events through rankflow on a new 3-primary cluster,
/// with `redis.url` as `url` makes it from the cluster (or the list of every
/// node); checks every board exact and the read API, and returns how many
/// board keys each primary holds.
async fn exact_on_cluster(
    events: usize,
    seed: u64,
    url: impl Fn(&RedisCluster) -> Option<String>,
) -> (usize, Vec<usize>) {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let mut setup = Setup::new_cluster(&broker, &cluster, MIXED_BOARDS);
    if let Some(url) = url(&cluster) {
        setup.redis_url = url;
    }
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(events, seed, 4, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let app = InProcess::start(&setup, clock).await;
    wait_boards(&cluster, &setup, &expect, Duration::from_secs(90)).await;
    // The board instances really are spread over the three primaries.
    let per_node = cluster.spread(&format!("{}:{{*", setup.prefix)).await;
    let (status, body) = get_json(&app.url("/v1/boards/star_coins/all/top?limit=3")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], expect["star_coins/all"].len());
    app.stop().await;
    (expect.len(), per_node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_board_is_exact_on_a_three_primary_cluster() {
    let (instances, per_node) = exact_on_cluster(20_000, 31, |_| None).await;
    println!(
        "verified: 20000 events, {instances} board instances exact on 3 primaries (keys per node {per_node:?})"
    );
}

/// One seed URL of a 3-primary cluster: rankflow asks the node (`INFO
/// cluster`), connects as a cluster client and applies every event exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_seed_url_of_a_cluster_is_enough() {
    // Only the second node, as a plain single URL.
    let (_, per_node) =
        exact_on_cluster(6_000, 41, |c| Some(format!("\"{}\"", c.nodes[1].url()))).await;
    println!("verified: 6000 events exact through one seed URL; keys per node {per_node:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_stream_on_a_cluster_applies_every_event_once() {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let mut setup = Setup::new_cluster(&broker, &cluster, MIXED_BOARDS);
    setup.batch = (500, 20);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(40_000, 32, 4, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let mut first = Process::start(&setup);
    let seen = wait_for(Duration::from_secs(90), "some events applied", || async {
        let n = cluster.positions_sum(&setup.prefix).await;
        (n >= 8_000).then_some(n)
    })
    .await;
    first.kill9();
    println!("injected: kill -9 after {seen} of 40000 events were applied (cluster)");
    let _second = Process::start(&setup);
    wait_boards(&cluster, &setup, &expect, Duration::from_secs(120)).await;
    println!("verified: every board exact after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_holding_a_board_is_resharded_while_events_flow() {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let mut setup = Setup::new_cluster(&broker, &cluster, MIXED_BOARDS);
    setup.batch = (500, 20);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(60_000, 33, 4, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        5_000,
        Duration::from_millis(400),
    );
    let _p = Process::start(&setup);
    let seen = wait_for(Duration::from_secs(90), "some events applied", || async {
        let n = cluster.positions_sum(&setup.prefix).await;
        (n >= 10_000).then_some(n)
    })
    .await;
    // star_coins is written by every gift: its slot is the busiest one.
    let slot = rankflow::board::keys::hash_slot("star_coins");
    let (from, _) = cluster.owner(slot);
    let to = (from + 1) % cluster.nodes.len();
    let mover = tokio::task::spawn_blocking(move || {
        let c = cluster;
        c.migrate_slot(slot, to);
        c
    });
    let cluster = mover.await.expect("migration");
    assert_eq!(cluster.owner(slot).0, to);
    println!(
        "injected: slot {slot} (board star_coins) moved from node {from} to node {to} after {seen} events, while events flowed"
    );
    feeder.await.expect("feeder");
    wait_boards(&cluster, &setup, &expect, Duration::from_secs(120)).await;
    println!("verified: every board exact after the resharding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_fails_over_to_its_replica_and_every_board_stays_exact() {
    let broker = Broker::start();
    let mut cluster = RedisCluster::start_with_replicas(1);
    let mut setup = Setup::new_cluster(&broker, &cluster, MIXED_BOARDS);
    setup.batch = (500, 20);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(60_000, 34, 4, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        5_000,
        Duration::from_millis(400),
    );
    // A batch is acknowledged only once the replica has it, so the
    // failover cannot take back what the positions already claim.
    let app = Process::start_env(&setup, &[("RANKFLOW_REDIS_WAIT_REPLICAS", "1")]);
    let seen = wait_for(Duration::from_secs(90), "some events applied", || async {
        let n = cluster.positions_sum(&setup.prefix).await;
        (n >= 15_000).then_some(n)
    })
    .await;
    let slot = rankflow::board::keys::hash_slot("star_coins");
    let (primary, _) = cluster.owner(slot);
    cluster.nodes[primary].kill9();
    println!(
        "injected: kill -9 of the primary of slot {slot} (board star_coins, node {primary}) after {seen} events"
    );
    let promoted = wait_for(
        Duration::from_secs(60),
        "a replica takes over the slot",
        || async {
            let (owner, _) = cluster.owner(slot);
            (owner != primary).then_some(owner)
        },
    )
    .await;
    println!("injected: node {promoted} (its replica) now serves slot {slot}");
    // The promoted node has no replica of its own, so no batch for its
    // slots can be acknowledged: the consumer holds rather than claiming
    // writes a second failure could lose. The old primary comes back as
    // its replica (as an operator would restart it).
    let held = cluster.positions_sum(&setup.prefix).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = cluster.positions_sum(&setup.prefix).await;
    assert_eq!(held, still, "nothing acknowledged without a replica");
    cluster.nodes[primary].restart();
    wait_for(
        Duration::from_secs(60),
        "the old primary rejoins as a replica",
        || async {
            let info = cluster.nodes[primary].cli(&["INFO", "replication"]);
            info.contains("master_link_status:up").then_some(())
        },
    )
    .await;
    println!(
        "verified: positions held at {held} for 3 s while the slot had no replica; injected: node {primary} restarted, now a replica"
    );
    feeder.await.expect("feeder");
    wait_boards(&cluster, &setup, &expect, Duration::from_secs(180)).await;
    let text = get_text(&app.url("/metrics")).await.unwrap_or_default();
    let errors = metric_sum(&text, "rankflow_redis_errors_total", &[]);
    assert!(errors > 0.0, "the outage was seen");
    println!(
        "verified: every board exact after the failover (60000 events; {errors} Redis errors counted, retried)"
    );
}
