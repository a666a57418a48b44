#!/bin/bash
# TensorBoard's cost to training: the demo's LLaMA-style model (examples/demo_llama.json, mock
# data) trained without and with --tensorboard-dir at the default interval (every iteration,
# Megatron's default tags plus every opt-in tag), the runs alternated REPEATS times (each pair's
# order swapped) so a slow phase of a shared machine hits both alike. Prints each pair's mean tokens/s over iterations
# 11..ITERS (from --metrics-file) and the ratio with/without, the time the training thread spent
# queueing scalars (tessera-train's "> tensorboard:" line: the precise figure, since the
# tokens/s of two runs differ by a few percent on a shared machine), then the mean ratio.
#   bash bench/tensorboard.sh [BUILD_BIN_DIR] [ITERS (default 200)] [REPEATS (default 3)]
set -eu
BIN="${1:-build/bin}"
iters="${2:-200}"
repeats="${3:-3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/tessera-tb-bench.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
common=(--config examples/demo_llama.json --mock-data
        --vocab-size 4096 --train-iters "$iters" --exit-duration-in-mins 0 --eval-iters 0
        --log-interval 1000000 --lr-decay-iters "$iters")
tb=(--tensorboard-dir "$tmp/tb" --log-timers-to-tensorboard --log-memory-to-tensorboard
    --log-throughput --log-world-size-to-tensorboard)
mean_tps() {  # mean tokens/s of iterations > 10 in a metrics file
  awk -F'"tokens_per_s":' 'NR > 10 { split($2, a, ","); s += a[1]; n++ } END { printf "%.1f", s / n }' "$1"
}
ratios=()
for r in $(seq "$repeats"); do
  rm -rf "$tmp/tb"
  # Alternate which goes first, so a drift of the machine's speed does not favour one.
  if [ $((r % 2)) -eq 1 ]; then
    "$BIN/tessera-train" "${common[@]}" --metrics-file "$tmp/off.jsonl" > /dev/null
    "$BIN/tessera-train" "${common[@]}" "${tb[@]}" --metrics-file "$tmp/on.jsonl" > "$tmp/on.out"
  else
    "$BIN/tessera-train" "${common[@]}" "${tb[@]}" --metrics-file "$tmp/on.jsonl" > "$tmp/on.out"
    "$BIN/tessera-train" "${common[@]}" --metrics-file "$tmp/off.jsonl" > /dev/null
  fi
  off=$(mean_tps "$tmp/off.jsonl")
  on=$(mean_tps "$tmp/on.jsonl")
  ratio=$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.4f", a / b }')
  records=$(( $(wc -c < "$(ls "$tmp"/tb/events.out.tfevents.*)") ))
  echo "run $r: tokens/s without TensorBoard $off, with $on (event file $records bytes): ratio $ratio"
  grep '^> tensorboard:' "$tmp/on.out"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | awk '{ s += $1 } END { printf "mean ratio with/without TensorBoard: %.4f over %d pairs\n", s / NR, NR }'
