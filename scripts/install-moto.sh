#!/usr/bin/env bash
# Installs the AWS emulator (PyPI moto[server]) into a virtualenv, once, and prints the path of
# its moto_server. The venv lives under the target dir so CI caches it with the build:
#   SPOTS_BOOSTER_MOTO_VENV overrides the location.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${SPOTS_BOOSTER_MOTO_VENV:-${CARGO_TARGET_DIR:-$root/target}/moto-venv}"
if [ ! -x "$venv/bin/moto_server" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]>=5.1,<6' >&2
fi
echo "$venv/bin/moto_server"
