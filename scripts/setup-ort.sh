#!/bin/sh
# Installs the reference executor of the tests (tests/ort/: ONNX Runtime from
# npm, see tests/ort/README.md): Node.js and npm from Debian when the machine
# has none, then the npm packages pinned by tests/ort/package-lock.json.
# Safe to run again: when the installed packages match the lock file and
# load, it only checks them (well under a second).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
ort="$root/tests/ort"
stamp="$ort/node_modules/.accpar-lock.sha256"

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

# Debian 12 provides Node.js 18 and npm 9, which are enough (the packages
# ask for Node >= 12 and npm 9 reads lock files of version 3). A machine
# that already has node and npm (from Debian or elsewhere) keeps them:
# installing Debian's npm beside another Node.js could replace it.
missing=""
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
# run_ort.js reads TensorProto files with the system's onnx.proto.
[ -f /usr/include/onnx/onnx.proto ] || missing="$missing libonnx-dev"
if [ -n "$missing" ]; then
  echo "setup-ort: installing$missing"
  $sudo apt-get update -qq
  # shellcheck disable=SC2086 # the list is split into package names on purpose
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 18 ]; then
  echo "setup-ort: Node.js $(node --version) is too old: tests/ort needs 18 or later" >&2
  exit 1
fi

want=$(sha256sum "$ort/package-lock.json" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   node "$ort/run_ort.js" --check >/dev/null 2>&1; then
  exit 0
fi

echo "setup-ort: installing the npm packages of tests/ort (package-lock.json)"
# npm ci installs exactly the lock file's versions, checked against its
# integrity hashes. Install scripts are not run: onnxruntime-node's only
# one downloads GPU libraries from outside the npm registry, which the CPU
# executor does not use and which cannot be fetched here;
# ONNXRUNTIME_NODE_INSTALL=skip tells it the same should a script run.
rm -f "$stamp"
(cd "$ort" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
if ! node "$ort/run_ort.js" --check; then
  echo "setup-ort: the packages installed but do not load (see the line above)" >&2
  exit 1
fi
echo "$want" > "$stamp"
