#!/usr/bin/env bash
# The benchmarks, each printing ratios against a baseline measured in the
# same run: the rule expression compiler against the cel interpreter, and
# the whole pipeline (1,000,000 gift events through tansu and Redis), the
# plain gift boards and issue 14's window workload, at the default batch
# settings and at 2,000-event batches, against a seed-style consumer (one
# pipelined round trip of ZINCRBY per event) in the same run, with Redis's time per command
# (scripts/profile.sh records the same workloads under perf); and the memory of
# a full 3h/1m window against a day board of the same members; a composite
# board's cost per event next to plain and tie-break boards; what rank=dense
# costs a reader without the dense-rank index against with it
# (BENCH_DENSE_VALUES, BENCH_DENSE_READS); and archiving a
# million-member period into PostgreSQL against batched and row-by-row
# INSERTs; and a rolling view last:7d over 7 day boards of 100,000 members
# (uncached, cached and 100 concurrent readers) against keeping the same
# board as a 7d/1d window (write cost per event); and 2,000 live-view (SSE)
# clients on one rankflow: Redis commands/s against one client per view,
# memory per client, and the delay from a change to its push.
# BENCH_EVENTS / BENCH_SEED_EVENTS shrink the pipeline load for a quick look
# (BENCH_NAIVE_EVENTS adds rankflow with max_events = 1 as a second figure;
# BENCH_BATCHES picks the batch settings, default and 2000/20)
# (BENCH_WORKLOADS=plain or windows runs one);
# BENCH_UNION_MEMBERS / BENCH_UNION_READS / BENCH_UNION_EVENTS the union one;
# BENCH_STREAM_CLIENTS / BENCH_STREAM_CHANGES the live-view one;
# BENCH_EVENTS / BENCH_ROUNDS / BENCH_MEMBERS the moderation one;
# BENCH_EVENTS / BENCH_ROUNDS the checks one; and a batch's apply calls and
# round trips on the 3-primary test cluster beside one Redis
# (BENCH_EVENTS, BENCH_BATCHES).
set -euo pipefail
cd "$(dirname "$0")/.."
TANSU_BIN=$(scripts/setup.sh | tail -n 1)
export TANSU_BIN
cargo bench --locked --bench expr
cargo bench --locked --bench window_memory
cargo bench --locked --bench pipeline
cargo bench --locked --bench composite
cargo bench --locked --bench dense
cargo bench --locked --bench archive
cargo bench --locked --bench unions
cargo bench --locked --bench streams
cargo bench --locked --bench moderation
cargo bench --locked --bench checks
cargo bench --locked --bench shadows
cargo bench --locked --bench cluster
