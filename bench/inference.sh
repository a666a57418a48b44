#!/bin/bash
# The inference engine's speed (docs/inference.md): build/bin/inference for GPT-2 124M and a
# ~1 B LLaMA-style model, fp32 and bf16: single-sequence decode against the memory-bandwidth
# limit measured in the same run, prefill against the GEMM rate measured in the same run,
# decode throughput at batch 1, 8 and 32.
# Usage: bench/inference.sh [BUILD_BIN_DIR] [extra flags for build/bin/inference]
set -euo pipefail
BIN_DIR="${1:-build/bin}"
shift || true
lscpu | grep -E "^Model name" || true
"$BIN_DIR/inference" --model all --dtype all --threads "$(nproc)" "$@"
