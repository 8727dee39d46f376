#!/bin/sh
# Golden-file test of the driver: NAME.cmd holds accparc's arguments on one
# line (@SHARED@ stands for the shared/ folder, @BUILD@ for the build
# folder, @SOURCE@ for the repository). NAME.out is the expected stdout of a successful run; NAME.err the
# expected stderr of a failing one, which must also print nothing on stdout.
# With ACCPAR_GOLDEN_UPDATE=1 a differing expected file is rewritten instead
# (review the diff before committing it).
set -u
accparc=$1 cmd=$2 shared=$3 build=$4
dir=$(dirname "$cmd") name=$(basename "$cmd" .cmd)
source=$(cd "$dir/../.." && pwd)
args=$(sed -e "s|@SHARED@|$shared|g" -e "s|@BUILD@|$build|g" -e "s|@SOURCE@|$source|g" "$cmd")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086 # the .cmd line is split into arguments on purpose
"$accparc" $args >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ -f "$dir/$name.err" ]; then
  [ "$rc" -ne 0 ] || { echo "$name: expected a failure, exit status was 0"; exit 1; }
  [ ! -s "$tmp/out" ] || { echo "$name: a failing run wrote to stdout:"; head -5 "$tmp/out"; exit 1; }
  sed -e "s|$shared|@SHARED@|g" -e "s|$build|@BUILD@|g" -e "s|$source|@SOURCE@|g" "$tmp/err" >"$tmp/err.norm"
  diff -u "$dir/$name.err" "$tmp/err.norm" ||
    { [ "${ACCPAR_GOLDEN_UPDATE:-}" = 1 ] && cp "$tmp/err.norm" "$dir/$name.err"; }
else
  [ "$rc" -eq 0 ] || { echo "$name: exit status $rc"; cat "$tmp/err"; exit 1; }
  sed -e "s|$shared|@SHARED@|g" -e "s|$build|@BUILD@|g" -e "s|$source|@SOURCE@|g" "$tmp/out" >"$tmp/out.norm"
  diff -u "$dir/$name.out" "$tmp/out.norm" ||
    { [ "${ACCPAR_GOLDEN_UPDATE:-}" = 1 ] && cp "$tmp/out.norm" "$dir/$name.out"; }
fi
