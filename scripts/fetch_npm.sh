#!/usr/bin/env bash
# Installs one pinned npm package (for the tokenizer tests' references) into a cache and prints
# the node_modules directory holding it. A second run does nothing.
# Usage: scripts/fetch_npm.sh NAME@VERSION [CACHE_DIR]
#        (default cache ${XDG_CACHE_HOME:-~/.cache}/tessera/npm)
set -euo pipefail
spec="${1:?usage: fetch_npm.sh NAME@VERSION [CACHE_DIR]}"
name="${spec%@*}"
cache="${2:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/npm}"
dir="$cache/${spec//\//_}"
if [ ! -f "$dir/node_modules/$name/package.json" ]; then
  command -v npm >/dev/null || { echo "fetch_npm: npm not found (run scripts/setup.sh)" >&2; exit 1; }
  mkdir -p "$cache"
  tmp="$(mktemp -d "$cache/tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  if ! npm install --silent --no-audit --no-fund --prefix "$tmp" "$spec" >"$tmp/log" 2>&1; then
    echo "fetch_npm: npm install $spec failed: $(tail -n 1 "$tmp/log")" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
fi
echo "$dir/node_modules"
