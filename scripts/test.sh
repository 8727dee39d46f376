#!/bin/sh
# Sets up, builds with warnings as errors and runs the whole test suite, then
# runs a representative part of it under AddressSanitizer and
# UndefinedBehaviorSanitizer: the suites thin their sweeps there, and
# tests/CMakeLists.txt lists the entries left out (ctest shows them disabled).
# Usage: scripts/test.sh [--no-sanitize]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/setup-ort.sh"
"$root/scripts/fetch-models.sh"
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S "$root" -B "$root/build" -DACCPAR_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$jobs"
(cd "$root/build" && ctest --output-on-failure -j "$jobs")

if [ "${1:-}" != "--no-sanitize" ]; then
  cmake -S "$root" -B "$root/build-asan" -DACCPAR_WERROR=ON -DACCPAR_SANITIZE=ON \
        -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build "$root/build-asan" -j "$jobs"
  (cd "$root/build-asan" && ctest --output-on-failure -j "$jobs")
fi
