#!/usr/bin/env bash
# The longest function definitions under src/ (lines from signature to closing brace), to keep
# them in sight (the training loop in train/ keeps its functions under ~80 lines).
# Usage: scripts/longest-functions.sh [COUNT] [DIR]   (default 10, src)
# Needs universal-ctags (Debian: apt install universal-ctags), which reports each function's end.
set -euo pipefail
count="${1:-10}"
dir="${2:-src}"
if ! command -v ctags-universal >/dev/null; then
  echo "longest-functions.sh: needs universal-ctags (apt install universal-ctags)" >&2
  exit 2
fi
ctags-universal -R --languages=C++ --kinds-C++=f --fields=+ne -x \
  --_xformat='%{line} %{end} %N %F' "$dir" 2>/dev/null |
  awk '$2 > 0 { print $2 - $1 + 1, $4 ":" $1, $3 }' | sort -rn | awk -v n="$count" 'NR <= n'
