#!/bin/bash
# Weight-only quantization's decode speed (docs/quantization.md): build/bin/quantized for GPT-2
# 124M and a ~1 B LLaMA-style model with bf16 activations — unquantized, then fp6, int8, q8_0
# and q4 — each format's single-sequence decode against its own memory-bandwidth limit measured
# in the same run, its speed-up over unquantized decode, and prefill tokens/s.
# Usage: bench/quantized.sh [BUILD_BIN_DIR] [extra flags for build/bin/quantized]
set -euo pipefail
BIN_DIR="${1:-build/bin}"
shift || true
lscpu | grep -E "^Model name" || true
"$BIN_DIR/quantized" --threads "$(nproc)" "$@"
