#!/usr/bin/env bash
# The demo on a fresh machine: installs what is missing, starts a local
# Kafka-compatible broker (tansu), Redis and a private PostgreSQL (the archive
# of closed periods) on free ports, runs rankflow with the example
# rankflow.toml and the synthetic producer, prints the web page's URL
# (http://127.0.0.1:<port>/, live boards in a browser) and shows a live
# top-10 in the terminal that redraws every second. Ctrl-C stops everything; the archived periods are
# listed on the way out.
# DEMO_SECONDS=N stops by itself after N seconds (for unattended runs).
# The demo's grace is 1 minute, so the hour of board hourly_coins that is
# running when the demo starts is archived one minute after it ends.
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
# PostgreSQL refuses to run as root: as root its tools run as `postgres`,
# which needs to reach the data directory inside $WORK.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
PG_DATA=$WORK/pg
PG_PORT=""
pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; else "$PG_BIN/$1" "${@:2}"; fi
}
psql_demo() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -X -q "$@"; }
cleanup() {
  trap - EXIT INT TERM
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "$PG_PORT" ]; then
    echo "demo: periods archived in PostgreSQL:" >&2
    psql_demo -c "SELECT board, scope, view, period, members, archived_at FROM rankflow_archived_periods ORDER BY archived_at" >&2 2>/dev/null \
      || echo "demo: (none: no archive table yet)" >&2
    pg pg_ctl stop -D "$PG_DATA" -m fast -w >/dev/null 2>&1 || true
  fi
  echo "demo: stopped; logs were in $WORK" >&2
}
trap cleanup EXIT INT TERM

KAFKA_PORT=$(free_port); REDIS_PORT=$(free_port); HTTP_PORT=$(free_port)
if [ "$(id -u)" -eq 0 ]; then
  chmod 711 "$WORK"
  mkdir -m 700 "$PG_DATA" && chown postgres:postgres "$PG_DATA"
fi
pg initdb -D "$PG_DATA" -A trust -U postgres -E UTF8 --no-sync >"$WORK/initdb.log" 2>&1
PG_PORT=$(free_port)
pg pg_ctl start -D "$PG_DATA" -w -l "$PG_DATA/postgres.log" \
  -o "-p $PG_PORT -k $PG_DATA -c listen_addresses=127.0.0.1 -c fsync=off" >/dev/null
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
"$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" >"$WORK/tansu.log" 2>&1 &
wait_port "$REDIS_PORT"; wait_port "$KAFKA_PORT"
"$TANSU" topic create rankflow-events --partitions 4 --broker "tcp://127.0.0.1:$KAFKA_PORT" >/dev/null
"$TANSU" topic create rankflow-closed --partitions 1 --broker "tcp://127.0.0.1:$KAFKA_PORT" >/dev/null

export RANKFLOW_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT"
export RANKFLOW_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
export RANKFLOW_HTTP_LISTEN="127.0.0.1:$HTTP_PORT"
export RANKFLOW_ARCHIVE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
export RANKFLOW_ARCHIVE_GRACE="1m"
export RANKFLOW_ARCHIVE_CLOSED_TOPIC="rankflow-closed"
"$BIN" run -c rankflow.toml >"$WORK/rankflow.log" 2>&1 &
wait_port "$HTTP_PORT"
"$BIN" produce -c rankflow.toml --events 0 --rate 300 --members 2000 --receivers 30 >"$WORK/produce.log" 2>&1 &

HOUR=$(date -u +%Y-%m-%dT%H)
CLOSES=$(date -u -d "@$(( ($(date +%s) / 3600 + 1) * 3600 + 60 ))" +%H:%M:%S)
cat >&2 <<INFO

demo: open the web page:  http://127.0.0.1:$HTTP_PORT/   (live top-N per board, periods, around me)

demo: broker 127.0.0.1:$KAFKA_PORT, redis 127.0.0.1:$REDIS_PORT, postgres 127.0.0.1:$PG_PORT, rankflow http://127.0.0.1:$HTTP_PORT
demo: try  curl http://127.0.0.1:$HTTP_PORT/v1/boards
demo:      redis-cli -p $REDIS_PORT ZREVRANGE rankflow:{star_coins}:all 0 9 WITHSCORES
demo: history: hour $HOUR of board hourly_coins closes at $CLOSES UTC and is archived within seconds; then
demo:      $BIN top hourly_coins hour -c rankflow.toml --period $HOUR
demo:      curl 'http://127.0.0.1:$HTTP_PORT/v1/boards/hourly_coins/hour/periods'
demo:      curl 'http://127.0.0.1:$HTTP_PORT/v1/boards/hourly_coins/hour/top?period=$HOUR'     ("source": "live" while Redis has it)
demo:      $PG_BIN/psql -h 127.0.0.1 -p $PG_PORT -U postgres -c "SELECT rank, member, score FROM rankflow_archive WHERE board = 'hourly_coins' AND view = 'hour' AND period = '$HOUR' ORDER BY rank LIMIT 10"
demo:      $TANSU cat consume rankflow-closed --broker tcp://127.0.0.1:$KAFKA_PORT     (the period-closed message)
demo:      redis-cli -p $REDIS_PORT DEL 'rankflow:{hourly_coins}:hour:$HOUR'     (then the same top answers with "source": "archive")
demo:      $BIN archive -c rankflow.toml     (one archive pass by hand; docs/history.md)
INFO
sleep 2
if [ -n "${DEMO_SECONDS:-}" ]; then
  timeout "$DEMO_SECONDS" "$BIN" top star_coins day -c rankflow.toml --limit 10 --watch || true
else
  "$BIN" top star_coins day -c rankflow.toml --limit 10 --watch
fi
