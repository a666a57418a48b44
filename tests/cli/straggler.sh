#!/bin/bash
# --log-straggler: after each log line, every timer's min and max over the ranks with their
# ranks, and the slowest rank by compute. A planted straggler (the test hook --inject-slow-rank
# R --inject-slow-forward-ms MS: rank R sleeps in every forward chunk) must be named, whichever
# rank it is, with at least the planted delay as its compute time.
# Usage: straggler.sh BUILD_BIN_DIR
BIN="${1:?usage: straggler.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" straggler
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--model gpt2-tiny --mock-data --lr 1e-3 --train-iters 10 --micro-batch-size 1
       --global-batch-size 4 --eval-iters 0 --log-interval 5 --num-threads 1 --log-straggler)

# planted NP SLOW_RANK LAYOUT...: every report names SLOW_RANK as the slowest, with compute of
# at least the planted 2 micro-batches x 25 ms per iteration (less 10 ms of slack). Under TP its
# partner's forward is as long (it waits in their all-reduces); the report takes the time inside
# tensor-parallel collectives out of compute, which is what tells the two apart.
planted() {
  local np="$1" slow="$2"
  shift 2
  run "$np" "${FLAGS[@]}" --inject-slow-rank "$slow" --inject-slow-forward-ms 25 "$@" || return 1
  local lines
  lines=$(grep -c '^ straggler (ms per iteration over '"$np"' ranks) |' "$TMP/out")
  [ "$lines" -eq 2 ] || { echo "  $lines straggler lines" >&2; return 1; }
  grep '^ straggler' "$TMP/out" | while read -r line; do
    local compute
    compute=$(echo "$line" | sed -nE "s/.*\| slowest: rank $slow, compute ([0-9.]+) ms.*/\1/p")
    [ -n "$compute" ] && awk -v c="$compute" 'BEGIN { exit !(c >= 40) }' ||
      { echo "  want rank $slow with compute >= 40 ms: $line" >&2; return 1; }
  done
}
check "data parallel, rank 1 planted" planted 2 1
check "data parallel, rank 0 planted" planted 2 0
check "TP 2 x DP 2, rank 2 planted" planted 4 2 --tensor-model-parallel-size 2
# Nothing planted: the report is there and its minima do not exceed its maxima.
run 2 "${FLAGS[@]}"
check "no straggler: exit 0" [ $? -eq 0 ]
check "no straggler: min <= max for every figure" awk '/^ straggler/ {
    n = split($0, parts, "|");
    for (i = 2; i <= n; i++) if (match(parts[i], /min ([0-9.]+) .* max ([0-9.]+)/)) {
      split(substr(parts[i], RSTART, RLENGTH), w, " "); if (w[2] + 0 > w[6] + 0) bad = 1 }
    seen++ } END { exit !(seen == 2 && !bad) }' "$TMP/out"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
