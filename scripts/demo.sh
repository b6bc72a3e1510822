#!/usr/bin/env bash
# The demo on a fresh machine: installs what is missing, starts a local
# Kafka-compatible broker (tansu) and Redis on free ports, runs rankflow with
# the example rankflow.toml and the synthetic producer, and shows a live
# top-10 that redraws every second. Ctrl-C stops everything.
# DEMO_SECONDS=N stops by itself after N seconds (for unattended runs).
set -euo pipefail
cd "$(dirname "$0")/.."
TANSU=$(scripts/setup.sh | tail -n 1)
echo "demo: building rankflow (release)..." >&2
cargo build --release --locked --quiet
BIN=$PWD/target/release/rankflow
WORK=$(mktemp -d -t rankflow-demo.XXXXXX)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "demo: nothing listens on port $1 (see $WORK/*.log)" >&2
  exit 1
}
cleanup() {
  trap - EXIT INT TERM
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  echo "demo: stopped; logs were in $WORK" >&2
}
trap cleanup EXIT INT TERM

KAFKA_PORT=$(free_port); REDIS_PORT=$(free_port); HTTP_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
"$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" >"$WORK/tansu.log" 2>&1 &
wait_port "$REDIS_PORT"; wait_port "$KAFKA_PORT"
"$TANSU" topic create rankflow-events --partitions 4 --broker "tcp://127.0.0.1:$KAFKA_PORT" >/dev/null

export RANKFLOW_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT"
export RANKFLOW_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
export RANKFLOW_HTTP_LISTEN="127.0.0.1:$HTTP_PORT"
"$BIN" run -c rankflow.toml >"$WORK/rankflow.log" 2>&1 &
wait_port "$HTTP_PORT"
"$BIN" produce -c rankflow.toml --events 0 --rate 300 --members 2000 --receivers 30 >"$WORK/produce.log" 2>&1 &

cat >&2 <<INFO
demo: broker 127.0.0.1:$KAFKA_PORT, redis 127.0.0.1:$REDIS_PORT, rankflow http://127.0.0.1:$HTTP_PORT
demo: try  curl http://127.0.0.1:$HTTP_PORT/v1/boards
demo:      redis-cli -p $REDIS_PORT ZREVRANGE rankflow:{star_coins}:all 0 9 WITHSCORES
INFO
sleep 2
if [ -n "${DEMO_SECONDS:-}" ]; then
  timeout "$DEMO_SECONDS" "$BIN" top star_coins day -c rankflow.toml --limit 10 --watch || true
else
  "$BIN" top star_coins day -c rankflow.toml --limit 10 --watch
fi
