#!/usr/bin/env bash
# The model step and the kernel benchmarks once per CPU target this machine can run, the kernels
# and oneDNN capped with TESSERA_CPU_TARGET in turn (docs/performance.md, "CPU targets").
# Each run prints the figure next to the reference measured in the same run (GEMM peak,
# memcpy bandwidth).
# Usage: bench/cpu_targets.sh [BUILD_BIN_DIR] [model|kernels|all]
set -euo pipefail
BIN="${1:-build/bin}"
what="${2:-all}"
case "$(uname -m)" in
  x86_64) candidates=(baseline avx2 avx512 avx512bf16) ;;
  aarch64) candidates=(neon) ;;
  *) candidates=(baseline) ;;
esac
for target in "${candidates[@]}"; do
  line=$(TESSERA_CPU_TARGET=$target "$BIN/tessera-train" --version 2>/dev/null)
  # A target the CPU cannot run falls back to a lower one: skip it rather than repeat that one.
  if [[ "$line" != *"kernels $target "* ]]; then
    echo "== $target: not supported by this CPU, skipped"
    continue
  fi
  echo "== $line"
  if [ "$what" = all ] || [ "$what" = model ]; then
    TESSERA_CPU_TARGET=$target "$BIN/model_step" --threads 2 --steps 5
  fi
  if [ "$what" = all ] || [ "$what" = kernels ]; then
    # The 2-thread cases of the per-thread-count benches, every case of loss_optim_bench.
    for bench in pointwise_bench attention_bench loss_optim_bench; do
      filter='threads:2'
      [ "$bench" = loss_optim_bench ] && filter='.'
      TESSERA_CPU_TARGET=$target OMP_NUM_THREADS=2 "$BIN/$bench" --benchmark_min_time=0.1 \
        --benchmark_filter="$filter" 2>/dev/null | grep -E '^(BM_|[A-Z][A-Za-z]+/)'
    done
  fi
done
