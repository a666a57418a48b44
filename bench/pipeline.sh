#!/bin/bash
# Pipeline bubble and activation memory on 2 ranks (one per core, 1 thread each), from the
# timeline tessera-train writes (--timeline-file): for 1F1B, GPipe and interleaved 1F1B with 2
# virtual stages, M = 2, 4, 8, 16 micro-batches, it prints each stage's measured idle share of the
# pipeline phase beside the theory, (P - 1) / (V*M + P - 1) with P = 2, and the first stage's
# peak activation memory (1F1B holds at most P micro-batches in flight, GPipe all M).
# The model is compute-heavy per stage (8 layers of hidden 512, sequence 256, byte vocabulary),
# so transfers are small next to a stage's forward and backward.
#   bash bench/pipeline.sh [BUILD_BIN_DIR]
set -eu
BIN="${1:-build/bin}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT="$(mktemp -d "${TMPDIR:-/tmp}/tessera-pp-bench.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
MODEL=(--model llama-tiny --num-layers 8 --hidden-size 512 --num-attention-heads 8
       --num-query-groups 8 --ffn-hidden-size 1408 --seq-length 256 --max-position-embeddings 256)
printf "%-12s %3s | %-15s | %-8s | %s\n" schedule M "idle per stage" theory "stage-0 peak activations"
for schedule in 1f1b gpipe interleaved; do
  extra=(--pipeline-schedule "$schedule")
  V=1
  if [ "$schedule" = interleaved ]; then extra+=(--num-layers-per-virtual-pipeline-stage 2); V=2; fi
  for M in 2 4 8 16; do
    mpirun --oversubscribe -np 2 "$BIN/tessera-train" "${MODEL[@]}" --mock-data --lr 1e-4 \
      --train-iters 2 --micro-batch-size 1 --global-batch-size "$M" --eval-iters 0 \
      --num-threads 1 --pipeline-model-parallel-size 2 "${extra[@]}" \
      --timeline-file "$OUT/t.json" > "$OUT/log"
    line=$(grep '^> timeline' "$OUT/log")
    idle=$(echo "$line" | sed -E 's/.*per rank: ([0-9. ]+);.*/\1/')
    mem=$(echo "$line" | sed -E 's/.*rank 0: ([0-9.]+ MiB).*/\1/')
    theory=$(awk -v m="$M" -v v="$V" 'BEGIN { printf "%.3f", 1 / (v * m + 1) }')
    printf "%-12s %3s | %-15s | %-8s | %s\n" "$schedule" "$M" "$idle" "$theory" "$mem"
  done
done
