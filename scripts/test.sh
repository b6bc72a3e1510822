#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing, then runs
# unit, property and integration tests (the integration tests start their own
# tansu brokers and redis-server processes on free ports).
set -euo pipefail
cd "$(dirname "$0")/.."
TANSU_BIN=$(scripts/setup.sh --tests | tail -n 1)
export TANSU_BIN
# Integration tests each start servers; two at a time suits a 2-core machine.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-2}"
cargo test --locked "$@"
