//! Chaos tests (docs/guarantees.md): real tansu and redis-server, rankflow as separate
//! processes, faults injected while events flow — consumers killed and
//! joining, Redis killed (AOF, `appendfsync everysec`) or frozen, its script
//! cache flushed, the broker restarted, SIGTERM during a Redis outage. Every
//! test ends by comparing every board with the reference exactly: no event
//! lost, none counted twice, once the group committed the end of every
//! partition and again after a quiet spell. Each prints what it injected and
//! verified. The first test checks that comparison itself: an increment
//! landing after the match, or offsets never committed, must fail it.

use crate::common;

use std::time::{Duration, Instant};

use common::reference::*;
use common::*;

/// Waits until the consumers recorded at least `n` applied messages.
async fn progress(redis: &Redis, setup: &Setup, n: i64, timeout: Duration) -> i64 {
    wait_for(timeout, &format!("{n} messages applied"), || async {
        let done = redis.positions_sum(&setup.prefix).await;
        (done >= n).then_some(done)
    })
    .await
}

fn chaos_setup(broker: &Broker, redis: &Redis) -> Setup {
    let mut setup = Setup::new(broker, redis, MIXED_BOARDS);
    setup.batch = (1000, 20);
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_check_fails_on_a_count_added_after_the_match_or_offsets_left_uncommitted() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 2).await;
    let (messages, expect) = mixed_events(2_000, 20, 2, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let clock: rankflow::clock::SharedClock = std::sync::Arc::new(rankflow::clock::SystemClock);
    let app = InProcess::start(&setup, clock).await;
    // An honest run passes.
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;

    // The same check again, with one extra increment written to Redis one
    // second after it matched: the quiet spell must catch it.
    let (member, _) = expect["star_coins/all"]
        .first_key_value()
        .map(|(m, s)| (m.clone(), *s))
        .expect("a member");
    let key = setup.key("star_coins", "all");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut conn = redis.conn().await;
    let (k, m) = (key.clone(), member.clone());
    let extra = tokio::spawn(async move {
        rx.await.expect("the check matched");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _: f64 = redis::cmd("ZINCRBY")
            .arg(&k)
            .arg(1)
            .arg(&m)
            .query_async(&mut conn)
            .await
            .expect("ZINCRBY");
    });
    let late = check_boards(&redis, &setup, &expect, Duration::from_secs(30), Some(tx)).await;
    extra.await.expect("increment task");
    let m = late.expect_err("a count added after the match must fail the check");
    assert_eq!(m.stage, Stage::Quiet, "{m}");
    assert!(
        m.after >= Duration::from_secs(1) && m.after < QUIET,
        "caught {:?} into the quiet spell: {m}",
        m.after
    );
    assert!(
        m.diff.len() == 1 && m.diff[0].contains("star_coins/all") && m.diff[0].contains(&member),
        "{m}"
    );
    println!("verified: an increment 1 s after the match was reported: {m}");

    // Undo it; a group that never committed anything is still not verified,
    // though every board matches.
    let mut conn = redis.conn().await;
    let _: f64 = redis::cmd("ZINCRBY")
        .arg(&key)
        .arg(-1)
        .arg(&member)
        .query_async(&mut conn)
        .await
        .expect("ZINCRBY");
    let mut other = chaos_setup(&broker, &redis);
    other.topic = setup.topic.clone();
    other.prefix = setup.prefix.clone();
    let uncommitted = check_boards(&redis, &other, &expect, Duration::from_secs(3), None).await;
    let m = uncommitted.expect_err("offsets never committed must fail the check");
    assert_eq!(m.stage, Stage::Reaching, "{m}");
    assert!(
        m.diff.is_empty() && m.offsets.contains("committed none"),
        "{m}"
    );
    println!("verified: boards equal but a group with no committed offsets was reported: {m}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_and_others_joining_leave_every_board_exact() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 8).await;
    let total = 200_000;
    let (messages, expect) = mixed_events(total, 21, 8, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        10_000,
        Duration::from_millis(400),
    );
    let mut a = Process::start(&setup);
    let b = Process::start(&setup);
    let seen = progress(&redis, &setup, 40_000, Duration::from_secs(120)).await;
    a.kill9();
    println!("injected: kill -9 of consumer A after {seen} of {total} messages were applied");
    let a2 = Process::start(&setup);
    let seen = progress(&redis, &setup, 120_000, Duration::from_secs(180)).await;
    let c = Process::start(&setup);
    println!(
        "injected: consumer C joins after {seen} messages (rebalance of 8 partitions over 3 consumers)"
    );
    feeder.await.expect("feeder");
    wait_boards(&redis, &setup, &expect, Duration::from_secs(240)).await;
    let mut revokes = 0.0;
    for p in [&b, &a2, &c] {
        let text = get_text(&p.url("/metrics")).await.unwrap_or_default();
        revokes += metric_sum(&text, "rankflow_rebalances_total", &[("kind", "revoke")]);
    }
    assert!(revokes >= 1.0, "the joins caused rebalances");
    println!(
        "verified: {} board instances equal the reference exactly after a kill -9, a restart and a join ({revokes} revocations seen)",
        expect.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_from_its_aof_loses_nothing() {
    let broker = Broker::start();
    // everysec: a kill -9 may lose up to a second of writes, which the
    // consumer must notice and read again from Kafka.
    let mut redis = Redis::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ]);
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 4).await;
    let total = 100_000;
    let (messages, expect) = mixed_events(total, 22, 4, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        5_000,
        Duration::from_millis(300),
    );
    let p = Process::start(&setup);
    let seen = progress(&redis, &setup, 20_000, Duration::from_secs(120)).await;
    redis.kill9();
    println!("injected: kill -9 of Redis after {seen} of {total} messages were applied");
    let health = p.url("/healthz");
    wait_for(Duration::from_secs(15), "/healthz 503", || async {
        (status_of(&health).await == 503).then_some(())
    })
    .await;
    let rss_down = p.rss_kib();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rss_later = p.rss_kib();
    let errors = metric_sum(
        &get_text(&p.url("/metrics")).await.unwrap_or_default(),
        "rankflow_redis_errors_total",
        &[],
    );
    assert!(errors >= 1.0, "Redis errors are counted");
    assert!(
        rss_later < 400 * 1024 && rss_later.saturating_sub(rss_down) < 64 * 1024,
        "memory bounded while Redis is down: {rss_down} KiB, then {rss_later} KiB"
    );
    redis.restart();
    println!("injected: Redis restarted from its append-only file");
    wait_for(Duration::from_secs(30), "/healthz 200 again", || async {
        (status_of(&health).await == 200).then_some(())
    })
    .await;
    feeder.await.expect("feeder");
    wait_boards(&redis, &setup, &expect, Duration::from_secs(180)).await;
    println!(
        "verified: /healthz went 503 and back, {errors} Redis errors counted, RSS {rss_down}->{rss_later} KiB while down, every board exact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_script_cache_mid_stream_reaches_no_board() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 4).await;
    let (mut messages, expect) = mixed_events(60_000, 23, 4, now_ms());
    // Half the events go out before the flush and half after it, so that
    // batches reach the emptied cache however far the consumer got (a
    // consumer that started late catches up in a few large batches).
    let after = messages.split_off(30_000);
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        5_000,
        Duration::from_millis(300),
    );
    let p = Process::start(&setup);
    let seen = progress(&redis, &setup, 10_000, Duration::from_secs(120)).await;
    let mut c = redis.conn().await;
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("SCRIPT FLUSH");
    println!("injected: SCRIPT FLUSH after {seen} messages");
    feeder.await.expect("feeder");
    feed(
        &broker,
        &setup.topic,
        after,
        5_000,
        Duration::from_millis(300),
    )
    .await
    .expect("feeder after the flush");
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(60), || p.log()).await;
    let noscript = metric_sum(
        &get_text(&p.url("/metrics")).await.unwrap_or_default(),
        "rankflow_redis_errors_total",
        &[("kind", "noscript")],
    );
    assert!(noscript >= 1.0, "the NOSCRIPT reply was seen and counted");
    println!("verified: {noscript} NOSCRIPT replies handled, every board exact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_redis_outage_exits_in_time_and_commits_nothing_unapplied() {
    let broker = Broker::start();
    let mut redis = Redis::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ]);
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(40_000, 24, 4, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages[..20_000]).await;
    let mut p = Process::start(&setup);
    progress(&redis, &setup, 5_000, Duration::from_secs(120)).await;
    redis.kill9();
    send_all(&broker.producer(), &setup.topic, &messages[20_000..]).await;
    let health = p.url("/healthz");
    wait_for(Duration::from_secs(15), "/healthz 503", || async {
        (status_of(&health).await == 503).then_some(())
    })
    .await;
    let sent = Instant::now();
    p.sigterm();
    let status = loop {
        if let Some(s) = p.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = sent.elapsed();
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        p.log()
    );
    println!("injected: Redis killed, then SIGTERM; exit 0 after {took:?}");
    // Whatever was committed must have been applied: a new consumer in the
    // same group, once Redis is back, must end exact.
    redis.restart();
    let _q = Process::start(&setup);
    wait_boards(&redis, &setup, &expect, Duration::from_secs(180)).await;
    println!(
        "verified: nothing unapplied was committed; the next consumer ended every board exact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_slows_the_consumer_without_growing_memory_or_leaving_the_group() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(60_000, 25, 4, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        5_000,
        Duration::from_millis(200),
    );
    let p = Process::start(&setup);
    progress(&redis, &setup, 5_000, Duration::from_secs(120)).await;
    let metrics = p.url("/metrics");
    let revokes_before = metric_sum(
        &get_text(&metrics).await.unwrap_or_default(),
        "rankflow_rebalances_total",
        &[("kind", "revoke")],
    );
    redis.signal("STOP");
    println!("injected: Redis frozen (SIGSTOP) for 12 s, longer than the 6 s session timeout");
    let rss0 = p.rss_kib();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let rss1 = p.rss_kib();
    redis.signal("CONT");
    feeder.await.expect("feeder");
    wait_boards(&redis, &setup, &expect, Duration::from_secs(180)).await;
    let revokes_after = metric_sum(
        &get_text(&metrics).await.unwrap_or_default(),
        "rankflow_rebalances_total",
        &[("kind", "revoke")],
    );
    assert_eq!(
        revokes_before, revokes_after,
        "the consumer stayed in its group"
    );
    assert!(
        rss1 < 400 * 1024 && rss1.saturating_sub(rss0) < 64 * 1024,
        "memory bounded while Redis was frozen: {rss0} KiB, then {rss1} KiB"
    );
    println!("verified: no rebalance, RSS {rss0}->{rss1} KiB while frozen, every board exact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_mid_stream_is_survived_exactly() {
    let s3 = S3::start();
    let mut broker = Broker::start_with(Some(format!("s3://{}/", s3.bucket)), s3.env());
    let redis = Redis::start();
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, expect) = mixed_events(40_000, 26, 4, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages[..20_000]).await;
    let _p = Process::start(&setup);
    let seen = progress(&redis, &setup, 8_000, Duration::from_secs(120)).await;
    broker.restart();
    println!("injected: broker restarted after {seen} of 40000 messages were applied");
    send_all(&broker.producer(), &setup.topic, &messages[20_000..]).await;
    wait_boards(&redis, &setup, &expect, Duration::from_secs(240)).await;
    println!("verified: the consumer reconnected and every board is exact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_lost_its_last_writes_is_refilled_from_kafka() {
    let broker = Broker::start();
    let mut redis = Redis::start_with(&["--appendonly", "no", "--save", ""]);
    let setup = chaos_setup(&broker, &redis);
    broker.create_topic(&setup.topic, 4).await;
    let total = 60_000;
    let (messages, expect) = mixed_events(total, 27, 4, now_ms());
    let feeder = feed(
        &broker,
        &setup.topic,
        messages,
        5_000,
        Duration::from_millis(300),
    );
    let p = Process::start(&setup);
    let at_snapshot = progress(&redis, &setup, 10_000, Duration::from_secs(120)).await;
    let mut c = redis.conn().await;
    let _: String = redis::cmd("SAVE").query_async(&mut c).await.expect("SAVE");
    let before_crash = progress(
        &redis,
        &setup,
        at_snapshot + 15_000,
        Duration::from_secs(120),
    )
    .await;
    // Back to the snapshot: everything applied since is gone from Redis,
    // while Kafka's committed offsets are already past it.
    redis.restart();
    let after = redis.positions_sum(&setup.prefix).await;
    println!(
        "injected: Redis restarted from a snapshot taken at ~{at_snapshot} messages; it had {before_crash}, now has {after}"
    );
    assert!(after < before_crash, "the restart lost writes");
    feeder.await.expect("feeder");
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(120), || {
        p.log()
    })
    .await;
    let log = p.log();
    assert!(
        log.contains("Redis lost state"),
        "the consumer noticed: {log}"
    );
    println!("verified: the lost messages were read again from Kafka; every board exact");
}

/// `redis.response_timeout_ms` bounds one round trip, not a whole batch:
/// ten round trips' worth of commands taking 5 ms of Redis each (1.6 s in
/// all) against a 1 s timeout are all answered, in order. Sent as one
/// pipeline, as before, the client gave up on the whole after 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_longer_than_the_response_timeout_is_answered_in_round_trips() {
    use rankflow::sink::store::{CALLS_PER_ROUND_TRIP, Store};
    let redis = Redis::start();
    let toml = format!(
        "{MIXED_BOARDS}\n[kafka]\nbrokers = \"unused:9092\"\ntopics = [\"t\"]\n[redis]\nurl = \"{}\"\nresponse_timeout_ms = 1000\n",
        redis.url()
    );
    let cfg =
        rankflow::config::Config::from_toml(&toml, std::path::Path::new("t.toml"), Vec::new())
            .expect("config");
    let store = Store::connect(&cfg.redis).await.expect("redis");
    // 5 ms of Redis per command: a script that spins on TIME.
    let spin = "local s = redis.call('TIME') local t0 = s[1] * 1000000 + s[2] \
                repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - t0 >= 5000 \
                return tonumber(ARGV[1])";
    let n = 10 * CALLS_PER_ROUND_TRIP;
    let cmds: Vec<redis::Cmd> = (0..n)
        .map(|i| {
            let mut c = redis::cmd("EVAL");
            c.arg(spin).arg(0).arg(i);
            c
        })
        .collect();
    let started = Instant::now();
    let replies = store
        .pipeline(&cmds, store.epoch())
        .await
        .expect("every round trip answered within the timeout");
    let took = started.elapsed();
    assert!(
        took > Duration::from_millis(1000),
        "the commands together outlast the timeout ({took:?}), or the test proves nothing"
    );
    let want: Vec<redis::Value> = (0..n as i64).map(redis::Value::Int).collect();
    assert_eq!(replies, want, "every reply, in order");
    println!("verified: {n} commands in {took:?} against a 1 s response timeout, replies in order");
}
