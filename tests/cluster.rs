//! The end-to-end and exactly-once scenarios against a real local Redis
//! Cluster of three primaries (three `redis-server --cluster-enabled yes`
//! joined by `redis-cli --cluster create`): every board instance lives in one
//! slot, calls are grouped per slot and routed per node, and a slot holding a
//! board is resharded to another node while events flow.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::reference::*;
use common::*;
use rankflow::clock::{SharedClock, SystemClock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_board_is_exact_on_a_three_primary_cluster() {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let setup = Setup::new_cluster(&broker, &cluster, MIXED_BOARDS);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(20_000, 31, 4, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let app = InProcess::start(&setup, clock).await;
    wait_boards(&cluster, &setup, &expect, Duration::from_secs(90)).await;
    // The board instances really are spread over the three primaries.
    let mut per_node = Vec::new();
    for n in &cluster.nodes {
        per_node.push(n.keys(&format!("{}:{{*", setup.prefix)).await.len());
    }
    assert!(
        per_node.iter().filter(|k| **k > 0).count() >= 2,
        "keys per node: {per_node:?}"
    );
    let (status, body) = get_json(&app.url("/v1/boards/star_coins/all/top?limit=3")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], expect["star_coins/all"].len());
    println!(
        "verified: 20000 events, {} board instances exact on 3 primaries (keys per node {per_node:?})",
        expect.len()
    );
    app.stop().await;
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
    let producer = broker.producer();
    let topic = setup.topic.clone();
    let feeder = tokio::spawn(async move {
        for part in messages.chunks(5_000) {
            send_all(&producer, &topic, part).await;
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
    });
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
