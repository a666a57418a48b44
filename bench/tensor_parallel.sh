#!/bin/bash
# Tensor-parallel overhead on this machine: GPT-2 124M forward+backward on 2 ranks, one thread
# each, as TP 1 (two data-parallel ranks, each with its own micro-batch, gradients all-reduced)
# and as TP 2 (both ranks on one micro-batch), with and without sequence parallelism.
#   bash bench/tensor_parallel.sh [BUILD_BIN_DIR] [--dtype bf16] [--steps S]
set -eu
BIN="${1:-build/bin}"
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT="$(mktemp -d "${TMPDIR:-/tmp}/tessera-tp-bench.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
mpirun --oversubscribe -np 2 "$BIN/tp_step" --tensor 1 "$@" | tee "$OUT/tp1"
mpirun --oversubscribe -np 2 "$BIN/tp_step" --tensor 2 "$@" | grep '^TP' | tee "$OUT/tp2"
mpirun --oversubscribe -np 2 "$BIN/tp_step" --tensor 2 "$@" --sequence-parallel | grep '^TP' |
  tee "$OUT/tp2sp"
rate() { grep '^TP' "$1" | sed -E 's/.* ([0-9]+) tokens\/s.*/\1/'; }
t1=$(rate "$OUT/tp1") t2=$(rate "$OUT/tp2") t2sp=$(rate "$OUT/tp2sp")
awk -v a="$t1" -v b="$t2" -v c="$t2sp" 'BEGIN {
  printf "on 2 ranks, TP 2 / TP 1 (DP 2) tokens/s: %.2f, with SP %.2f (1.00: tensor parallelism costs nothing)\n", b / a, c / a }'
