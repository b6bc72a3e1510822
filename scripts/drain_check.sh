#!/usr/bin/env bash
# SIGTERM rankflow while it catches up on a queued backlog of window-board
# events, and print how long it took to drain, commit and exit (docs/guarantees.md:
# within 10 s). BENCHMARKS.md, "Shutdown while catching up", has the figures.
# DRAIN_EVENTS (default 1000000) events are queued; SIGTERM is sent once
# DRAIN_AFTER (default 300000) are applied.
set -euo pipefail
cd "$(dirname "$0")/.."
TANSU=$(scripts/setup.sh | tail -n 1)
cargo build --release --locked --quiet
BIN=$PWD/target/release/rankflow
WORK=$(mktemp -d -t rankflow-drain.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "drain_check: nothing listens on port $1" >&2; exit 1
}
applied() {
  curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '/^rankflow_events_total/ && /outcome="applied"/ {s += $2} END {print s + 0}'
}
KAFKA_PORT=$(free_port); REDIS_PORT=$(free_port); HTTP_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
"$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" >"$WORK/tansu.log" 2>&1 &
wait_port "$REDIS_PORT"; wait_port "$KAFKA_PORT"
"$TANSU" topic create events --partitions 8 --broker "tcp://127.0.0.1:$KAFKA_PORT" >/dev/null
cat >"$WORK/rankflow.toml" <<TOML
[kafka]
brokers = "127.0.0.1:$KAFKA_PORT"
group_id = "drain-check"
topics = ["events"]
[redis]
url = "redis://127.0.0.1:$REDIS_PORT"
[http]
listen = "127.0.0.1:$HTTP_PORT"
$(sed -n '/^const WINDOWS/,/^"#;/p' benches/pipeline.rs | sed '1d;$d')
TOML
"$BIN" produce -c "$WORK/rankflow.toml" --events "${DRAIN_EVENTS:-1000000}" --rate 0 \
  --members 100000 --receivers 1000 --types gift >"$WORK/produce.log" 2>&1
"$BIN" run -c "$WORK/rankflow.toml" >"$WORK/rankflow.log" 2>&1 &
PID=$!
wait_port "$HTTP_PORT"
until [ "$(applied)" -ge "${DRAIN_AFTER:-300000}" ]; do sleep 0.1; done
echo "drain_check: $(applied) events applied; SIGTERM"
START=$(date +%s.%N)
kill -TERM "$PID"
STATUS=0; wait "$PID" || STATUS=$?
echo "drain_check: exit status $STATUS after $(python3 -c "print(round($(date +%s.%N) - $START, 2))") s"
grep -E "Offsets committed|did not|deadline" "$WORK/rankflow.log" | sed 's/^/drain_check: /'
