#!/bin/sh
# Installs every Debian package accpar's build, tests, demo and benchmarks
# need. Safe to run again: it installs only what is missing.
set -eu
packages="
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev
  libcriterion-dev libonnx-testdata python3-onnx python3-numpy
  llvm-15-dev libopenblas-dev libopenmpi-dev openmpi-bin
  graphviz chromium python3-jsonschema
"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # shellcheck disable=SC2086 # the list is split into package names on purpose
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
fi
