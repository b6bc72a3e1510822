#!/usr/bin/env bash
# The benchmarks, each printing ratios against a baseline measured in the
# same run: the rule expression compiler against the cel interpreter, and
# the whole pipeline (1,000,000 gift events through tansu and Redis) with the
# default batch settings against one round trip per event; and the memory of
# a full 3h/1m window against a day board of the same members; a composite
# board's cost per event next to plain and tie-break boards; and archiving a
# million-member period into PostgreSQL against batched and row-by-row
# INSERTs.
# BENCH_EVENTS / BENCH_NAIVE_EVENTS shrink the pipeline load for a quick look.
set -euo pipefail
cd "$(dirname "$0")/.."
TANSU_BIN=$(scripts/setup.sh | tail -n 1)
export TANSU_BIN
cargo bench --locked --bench expr
cargo bench --locked --bench window_memory
cargo bench --locked --bench pipeline
cargo bench --locked --bench composite
cargo bench --locked --bench archive
