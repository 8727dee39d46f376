#!/bin/sh
# Golden test of generated programs: NAME.cmd holds the arguments of
# `accparc compile` (@SHARED@, @BUILD@, @SOURCE@ as in run.sh; the output
# folder is added), NAME/ the expected files: every file there must be
# produced exactly (paths inside them read as @OUT@). With
# ACCPAR_GOLDEN_UPDATE=1 differing expected files are rewritten instead
# (review the diff before committing them).
set -u
accparc=$1 cmd=$2 shared=$3 build=$4
dir=$(dirname "$cmd") name=$(basename "$cmd" .cmd)
source=$(cd "$dir/../../.." && pwd)
args=$(sed -e "s|@SHARED@|$shared|g" -e "s|@BUILD@|$build|g" -e "s|@SOURCE@|$source|g" "$cmd")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
out=$(cd "$tmp" && pwd -P)/out
# shellcheck disable=SC2086 # the .cmd line is split into arguments on purpose
"$accparc" compile $args --no-build -o "$out" >"$tmp/stdout" 2>"$tmp/stderr" ||
  { echo "$name: accparc failed:"; cat "$tmp/stderr"; exit 1; }
status=0
for want in "$dir/$name"/*; do
  file=$(basename "$want")
  [ -f "$out/$file" ] || { echo "$name: $file was not written"; status=1; continue; }
  sed -e "s|$out|@OUT@|g" "$out/$file" >"$tmp/got"
  if ! diff -u "$want" "$tmp/got"; then
    status=1
    [ "${ACCPAR_GOLDEN_UPDATE:-}" = 1 ] && cp "$tmp/got" "$want"
  fi
done
exit $status
