#!/bin/bash
# Checkpoint throughput and training stall on 2 ranks (DP 2, ZeRO 1: each rank writes half).
# The model is LLaMA-style, 12 layers of hidden 512, untied 32000-token vocabulary: ~71M
# parameters, so a checkpoint (fp32 master weights + Adam's two moments) is ~0.86 GB.
# Prints:
#  - save and load throughput (GB/s, the trainer's own figures: bytes of every rank over the
#    time from the first byte to the published checkpoint, fsyncs included), next to the
#    disk's sequential write rate with fsync (dd) and the rate `cat` reads the files at (from
#    the disk: they were written with O_DIRECT, so the page cache does not hold them) measured
#    in the same run;
#  - how long training pauses per save: synchronous (the whole save) against --async-save (the
#    snapshot only), and the iteration time while a background save is writing against the same
#    iterations of a run without saves. Saves at iterations 3, 6 and 9; the figures are taken
#    at the second (the first save of a process also pays for touching fresh memory: on this
#    VM the first touch of a page is slow, which makes iteration 1 and the iteration after the
#    first snapshot several times longer).
#   bash bench/checkpoint.sh [BUILD_BIN_DIR]
set -eu
BIN="${1:-build/bin}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT="$(mktemp -d "${TMPDIR:-/tmp}/tessera-ckpt-bench.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
RUN=(--model llama-tiny --num-layers 12 --hidden-size 512 --num-attention-heads 8
     --num-query-groups 8 --ffn-hidden-size 1408 --vocab-size 32000 --seq-length 64
     --max-position-embeddings 64 --mock-data --lr 1e-4 --micro-batch-size 1
     --global-batch-size 2 --eval-interval 0 --log-interval 1 --num-threads 1 --zero-stage 1)
train() { mpirun --oversubscribe -np 2 "$BIN/tessera-train" "${RUN[@]}" "$@"; }

# mean_iter FILE FIRST LAST: mean iter_time_s (ms) of iterations FIRST..LAST of a metrics file.
mean_iter() {
  awk -F'"iter_time_s":' -v a="$2" -v b="$3" '{ split($1, i, "\"iteration\":"); split(i[2], n, ",");
    split($2, t, ","); if (n[1] >= a && n[1] <= b) { s += t[1]; c++ } }
    END { printf "%.1f", 1000 * s / c }' "$1"
}

echo "== reference rates on this disk =="
bytes=$((860 * 1024 * 1024))
t0=$(date +%s.%N)
dd if=/dev/zero of="$OUT/dd" bs=8M count=$((bytes / 8388608)) conv=fsync status=none
t1=$(date +%s.%N)
echo "sequential write with fsync (dd, 0.90 GB): $(awk -v b=$bytes -v a="$t0" -v c="$t1" 'BEGIN { printf "%.2f", b / 1e9 / (c - a) }') GB/s"
rm -f "$OUT/dd"

echo "== synchronous saves at iterations 3, 6 and 9 =="
train --train-iters 9 --save "$OUT/sync" --save-interval 3 --metrics-file "$OUT/sync.jsonl" \
  | grep "^> saved\|^> model"
t0=$(date +%s.%N)
cat "$OUT"/sync/iter_0000009/rank_* >/dev/null
t1=$(date +%s.%N)
size=$(du -cb "$OUT"/sync/iter_0000009/rank_* | tail -1 | cut -f1)
echo "read of the checkpoint files (cat; written with O_DIRECT, so from the disk): $(awk -v b="$size" -v a="$t0" -v c="$t1" 'BEGIN { printf "%.2f", b / 1e9 / (c - a) }') GB/s"

echo "== load into the same layout (DP 2) and into one process =="
train --train-iters 10 --load "$OUT/sync" | grep "^> loaded"
mpirun -np 1 "$BIN/tessera-train" "${RUN[@]/--zero-stage/--seed}" --train-iters 10 --load "$OUT/sync" \
  | grep "^> loaded"

echo "== --async-save at iterations 3, 6 and 9, and a run without saves =="
train --train-iters 9 --save "$OUT/async" --save-interval 3 --async-save \
  --metrics-file "$OUT/async.jsonl" | grep "^> saved"
train --train-iters 9 --metrics-file "$OUT/none.jsonl" >/dev/null
echo "iteration time (ms), iterations 7-8 (after the save at 6): no saves $(mean_iter "$OUT/none.jsonl" 7 8)," \
  "synchronous $(mean_iter "$OUT/sync.jsonl" 7 8), async (writing in the background) $(mean_iter "$OUT/async.jsonl" 7 8)"
