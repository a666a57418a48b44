#!/bin/bash
# Tensor-parallel overhead on this machine: GPT-2 124M forward+backward at TP 1 (one rank) and
# TP 2 (two ranks), one thread per rank, with and without sequence parallelism.
#   bash bench/tensor_parallel.sh [BUILD_BIN_DIR] [--dtype bf16] [--steps S]
set -eu
BIN="${1:-build/bin}"
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT="$(mktemp -d "${TMPDIR:-/tmp}/tessera-tp-bench.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
"$BIN/tp_step" "$@" | tee "$OUT/tp1"
mpirun --oversubscribe -np 2 "$BIN/tp_step" "$@" | grep '^TP' | tee "$OUT/tp2"
mpirun --oversubscribe -np 2 "$BIN/tp_step" "$@" --sequence-parallel | grep '^TP' | tee "$OUT/tp2sp"
rate() { grep '^TP' "$1" | sed -E 's/.* ([0-9]+) tokens\/s.*/\1/'; }
t1=$(rate "$OUT/tp1") t2=$(rate "$OUT/tp2") t2sp=$(rate "$OUT/tp2sp")
awk -v a="$t1" -v b="$t2" -v c="$t2sp" 'BEGIN {
  printf "TP 2 / TP 1 tokens/s: %.2fx, with SP %.2fx (2 ranks on 2 cores: 2.00x would be free)\n", b / a, c / a }'
