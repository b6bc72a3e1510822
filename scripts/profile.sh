#!/usr/bin/env bash
# Issue 14 point 1, issue 32 point 4: where rankflow's and Redis's CPU goes,
# for the plain and the window workloads of benches/pipeline.rs, each at the
# default batch settings and at 2,000-event batches.
#
# - builds the pipeline bench in release with debug symbols and frame
#   pointers (`-g` call graphs) in its own target dir (target/profiling), so
#   the normal release build is left alone;
# - runs it once per workload under `perf record -g`, sampling only while
#   the batched workload is consumed (the bench drives `perf --control`; the
#   events are produced with sampling off). perf follows the bench's child
#   processes, so redis-server is sampled in the same recording;
# - prints `perf report --no-children` top symbols by self time of rankflow
#   (the bench process: consumer, tokio and librdkafka threads) and of
#   redis-server, the share of rankflow's samples per pipeline stage (each
#   sample goes to the innermost frame a stage claims), and writes folded
#   stacks (`<thread>;<outer>;...;<leaf> <count>`, flamegraph.pl's input);
# - runs both workloads once more without perf and with BENCH_SLOWLOG=1:
#   Redis's time per command (INFO commandstats) and per script call
#   (SLOWLOG, threshold 0).
#
# Usage: scripts/profile.sh [output dir, default target/profile]
# Knobs: BENCH_EVENTS (events per workload, default 1000000; the SLOWLOG run
# uses a fifth), PROFILE_WORKLOADS (default "plain windows"), PROFILE_FREQ
# (samples per second, default 999), PROFILE_BATCHES (default "default
# 2000/20", as BENCH_BATCHES takes them), PROFILE_BIN (a pipeline bench executable
# to profile instead of building one, e.g. the plain release build: symbols
# but no frame pointers, so call stacks stop early). linux-perf is installed (apt) if
# missing; CI and scripts/setup.sh do not need it.
set -euo pipefail
cd "$(dirname "$0")/.."
TANSU_BIN=$(scripts/setup.sh | tail -n 1)
export TANSU_BIN

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
# Debian's /usr/bin/perf is a wrapper that fails without the tools of the
# running kernel's series; `perf --version` tells whether it works.
if ! perf --version >/dev/null 2>&1; then
  echo "profile: installing linux-perf (apt)" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >&2
fi

out=${1:-target/profile}
mkdir -p "$out"
events=${BENCH_EVENTS:-1000000}
workloads=${PROFILE_WORKLOADS:-plain windows}
batches=${PROFILE_BATCHES:-default 2000/20}
freq=${PROFILE_FREQ:-999}

if [ -n "${PROFILE_BIN:-}" ]; then
  bin=$PROFILE_BIN
else
  echo "profile: building the pipeline bench (release, debug symbols, frame pointers)..." >&2
  export CARGO_TARGET_DIR=target/profiling
  export CARGO_PROFILE_RELEASE_DEBUG=true
  export RUSTFLAGS="-C force-frame-pointers=yes"
  bin=$(cargo bench --locked --bench pipeline --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -n 1)
fi
[ -x "$bin" ] || { echo "profile: no bench executable found" >&2; exit 1; }

# Each sample of rankflow goes to the stage of its innermost frame that a
# stage claims (kernel frames and the allocator are skipped, so a page fault
# or a malloc counts for the code that caused it); librdkafka's threads are
# the Kafka client whatever they run.
stages() {
  python3 - "$1" <<'PY'
import re, sys
from collections import Counter
STAGES = [
    ("validate", r"jsonschema|referencing::|fancy_regex|regex_automata|regex::"),
    ("decode", r"serde_json|serde::de|rankflow::event::|core::str::converts::from_utf8|core::str::validations"),
    ("rules", r"rankflow::rules|rankflow::expr|rankflow::board::resolve"),
    ("batch", r"rankflow::sink::batch|rankflow::sink::aggregate|rankflow::engine::(intake|queue|partitions|drain)"),
    ("encode", r"rankflow::sink::call|rankflow::sink::expiry|rankflow::board::keys|redis::cmd|redis::Cmd|core::fmt|alloc::fmt|itoa|ryu"),
    ("send", r"redis::|rankflow::sink|rankflow::engine::flush|tokio::net|mio::"),
    ("kafka", r"rdkafka|rd_kafka|^rd_|zstd|ZSTD|crc32"),
    # Hash maps and B-trees serve the batch (pre-aggregation) and decode
    # (serde_json's Map is a BTreeMap) alike: only a caller frame tells.
    ("collections (hash maps, B-trees)", r"hashbrown|BuildHasher|core::hash|btree"),
    ("runtime", r"tokio::|std::|futures|parking_lot|core::|alloc::|rankflow::"),
]
compiled = [(name, re.compile(rx)) for name, rx in STAGES]
skip = re.compile(r"\[k\]|^mi_|^_mi_|mimalloc|^__memmove|^__memcpy|^memcpy|^memmove|^__memset|^_int_|^malloc|^free$")
counts, total = Counter(), 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    frames = stack.split(";")
    n = int(n)
    total += n
    if frames[0].startswith("rdk:"):
        counts["kafka"] += n
        continue
    stage = "other (allocator, libc, kernel only)"
    for frame in reversed(frames[1:]):
        if skip.search(frame):
            continue
        hit = next((s for s, rx in compiled if rx.search(frame)), None)
        if hit:
            stage = hit
            break
    counts[stage] += n
for stage, n in counts.most_common():
    print(f"  {stage:<38} {100.0 * n / max(total, 1):6.1f}%  ({n} samples)")
# Self time: the leaf symbol alone, with what the stages leave unclaimed
# split into the allocator, page faults (the kernel zeroing fresh pages),
# libc's memcmp/memmove, scheduling and the rest of the kernel.
LEAF = [
    ("allocator (mimalloc)", r"^mi_|^_mi_|mimalloc"),
    ("page faults (kernel zeroes new pages)", r"clear_page|do_anonymous_page|handle_mm_fault|page_fault"),
    ("libc memcmp/memmove/memcpy", r"__mem(cmp|move|cpy|set)"),
    ("scheduling, futex, clock (kernel, vdso)", r"finish_task_switch|_raw_spin|futex|schedule|vdso|clock_gettime"),
    ("kernel, other", r"\[k\]"),
]
leaf_rx = [(name, re.compile(rx)) for name, rx in LEAF]
self_counts = Counter()
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    frames = stack.split(";")
    leaf = frames[-1]
    if frames[0].startswith("rdk:"):
        stage = "kafka"
    else:
        stage = next((s for s, rx in compiled if rx.search(leaf)), None)
        stage = stage or next((s for s, rx in leaf_rx if rx.search(leaf)), "other")
    self_counts[stage] += int(n)
print("  -- self time (leaf symbol only) --")
for stage, n in self_counts.most_common():
    print(f"  {stage:<38} {100.0 * n / max(total, 1):6.1f}%  ({n} samples)")
PY
}

# Folds `perf script` output into one line per distinct stack, outermost
# frame first, with the thread name as the root.
fold() {
  python3 -c '
import sys
from collections import Counter
stacks, comm, frames = Counter(), None, []
def flush():
    if comm is not None and frames:
        stacks[";".join([comm] + frames[::-1])] += 1
for line in sys.stdin:
    if not line.strip():
        flush(); comm, frames = None, []
    elif not line[0].isspace():
        flush(); comm, frames = line.split()[0], []
    else:
        parts = line.strip().split(" ", 1)
        sym = parts[1] if len(parts) > 1 else parts[0]
        frames.append(sym.rsplit(" (", 1)[0].replace(";", ":"))
flush()
for stack, n in stacks.most_common():
    print(stack, n)
'
}

for workload in $workloads; do
for batch in $batches; do
  w="$workload-${batch//\//_}"
  data="$out/perf-$w.data"
  ctl="$out/perf-$w.ctl"
  rm -f "$ctl"
  mkfifo "$ctl"
  echo "profile: $w workload, $events events, perf record -g at $freq Hz..." >&2
  BENCH_WORKLOADS=$workload BENCH_BATCHES=$batch BENCH_NAIVE_EVENTS=0 BENCH_SEED_EVENTS=0 BENCH_EVENTS=$events BENCH_PERF_CTL=$ctl \
    perf record -F "$freq" -g --control "fifo:$ctl" -D -1 -o "$data" -- "$bin" \
    >"$out/bench-$w.txt" 2>"$out/bench-$w.log"
  rm -f "$ctl"
  pids=$(sed -n 's/^bench pid \([0-9]*\), redis pid \([0-9]*\)$/\1 \2/p' "$out/bench-$w.log")
  read -r bench_pid redis_pid <<<"$pids"
  perf script -i "$data" --pid "$bench_pid" -F comm,ip,sym 2>/dev/null | fold >"$out/rankflow-$w.folded"
  perf script -i "$data" --pid "$redis_pid" -F comm,ip,sym 2>/dev/null | fold >"$out/redis-$w.folded"
  {
    echo "=== $w: the bench's figures ==="
    cat "$out/bench-$w.txt"
    echo
    echo "=== $w: samples per process ==="
    perf report -i "$data" --no-children --sort pid -g none --stdio 2>/dev/null | grep -v '^#' | sed '/^$/d' | head -n 6
    echo
    echo "=== $w: rankflow (pid $bench_pid) by pipeline stage ==="
    stages "$out/rankflow-$w.folded"
    echo
    echo "=== $w: rankflow (pid $bench_pid), top symbols by self time ==="
    perf report -i "$data" --pid "$bench_pid" --no-children --percentage relative --sort dso,sym -g none \
      --percent-limit 0.7 --stdio 2>/dev/null | grep -v '^#' | sed '/^$/d' | head -n 45
    echo
    echo "=== $w: redis-server (pid $redis_pid), top symbols by self time ==="
    perf report -i "$data" --pid "$redis_pid" --no-children --percentage relative --sort dso,sym -g none \
      --percent-limit 1 --stdio 2>/dev/null | grep -v '^#' | sed '/^$/d' | head -n 30
    echo
  } | tee "$out/report-$w.txt"
done
done

echo "=== Redis per command and per script call (no perf, BENCH_SLOWLOG=1, $((events / 5)) events each) ===" |
  tee "$out/redis-split.txt"
BENCH_SLOWLOG=1 BENCH_NAIVE_EVENTS=0 BENCH_SEED_EVENTS=0 BENCH_EVENTS=$((events / 5)) "$bin" 2>"$out/bench-slowlog.log" |
  tee -a "$out/redis-split.txt"
echo "profile: reports, perf data and folded stacks in $out" >&2
