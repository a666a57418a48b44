#!/usr/bin/env bash
# Context-parallel figures (docs/context_parallel.md), llama-tiny's layers (hidden 64, 4 heads,
# 2 key/value groups of 16), one thread per rank:
#  1. balance and bytes: the attention core of one layer forward + backward at S 8192 under CP 2
#     and 4 for p2p, all_gather and a2a (build/bin/context_parallel --what attention): per rank the
#     query-key pairs its kernels computed (and what a contiguous split would have given), the
#     step time and its spread, the bytes handed to MPI against the analytic count;
#  2. memory: a two-layer model's forward + backward at S 8192 under CP 1, 2 and 4, peak
#     activation and communication-buffer bytes per rank; then the longest S (a multiple of 512,
#     by bisection) whose activations and buffers fit CAP MiB per rank, for CP 1, 2 and 4;
#  3. long context: tessera-train on llama-tiny at sequence length 32768 under CP 4 (p2p), three
#     iterations (tokens/s, rank 0's peak memory), and the per-rank peaks of that step.
# Usage: bench/context_parallel.sh [BUILD_BIN_DIR] [balance|memory|long|all] [CAP_MIB (64)]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build/bin}"
what="${2:-all}"
cap="${3:-64}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# launch N ARGS...: the bench on N ranks (one process without mpirun at N = 1).
launch() {
  local n="$1"
  shift
  if [ "$n" -eq 1 ]; then "$BIN/context_parallel" "$@"
  else mpirun --oversubscribe -np "$n" "$BIN/context_parallel" "$@"; fi
}

if [ "$what" = all ] || [ "$what" = balance ]; then
  for n in 2 4; do
    for type in p2p all_gather a2a; do
      launch "$n" --what attention --type "$type" --seq 8192 --steps 5
    done
  done
fi

if [ "$what" = all ] || [ "$what" = memory ]; then
  for n in 1 2 4; do launch "$n" --what memory --seq 8192; done
  # fits N S: the highest per-rank peak of activations plus communication buffers is <= cap.
  fits() {
    launch "$1" --what memory --seq "$2" | awk -v cap="$cap" '
      /^peak activations/ { for (i = 4; i <= NF - 3; ++i) a[i] = $i }
      /^peak communication/ { for (i = 5; i <= NF - 3; ++i) { t = a[i - 1] + $i; if (t > m) m = t } }
      END { exit !(m > 0 && m <= cap) }'
  }
  # Bisection over multiples of 512: lo fits, hi does not.
  for n in 1 2 4; do
    lo=0 hi=512
    while fits "$n" "$hi"; do lo=$hi; hi=$((hi * 2)); [ "$hi" -le 1048576 ] || break; done
    while [ $((hi - lo)) -gt 512 ]; do
      mid=$(( (lo + hi) / 1024 * 512 ))
      if fits "$n" "$mid"; then lo=$mid; else hi=$mid; fi
    done
    echo "S_max at CP $n under $cap MiB per rank (activations + communication buffers): $lo"
  done
fi

if [ "$what" = all ] || [ "$what" = long ]; then
  mpirun --oversubscribe -np 4 "$BIN/tessera-train" --model llama-tiny --seq-length 32768 \
    --mock-data --lr 1e-3 --train-iters 3 --micro-batch-size 1 --global-batch-size 1 \
    --num-threads 1 --context-parallel-size 4 --log-interval 1 --eval-iters 0 |
    grep -E '^> context parallel|^ iteration'
  launch 4 --what memory --seq 32768
fi
