#!/usr/bin/env bash
# Prints the path of a command the tests need, installing its Debian package first when it is
# missing: `scripts/install-apt-tool.sh promtool prometheus`, `… chromium chromium`.
# Installing needs root or password-less sudo; otherwise it says what to install and fails, so a
# test never skips for want of a tool.
set -euo pipefail
command_name="$1"
package="$2"
if path="$(command -v "$command_name")"; then
  echo "$path"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "$command_name is missing: install the Debian package '$package' (apt-get install $package)" >&2
  exit 1
fi
install() {
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "$package" >&2
}
# A fresh machine may have no package lists yet.
install || { "${as_root[@]}" apt-get update -q >&2 && install; }
command -v "$command_name"
