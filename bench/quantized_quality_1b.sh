#!/bin/bash
# Weight-only quantization's quality on a ~1 B model (docs/quantization.md): the llama-1b preset
# (TinyLlama-1.1B's shape: 22 layers, hidden 2048, 32 heads, 4 key/value groups, SwiGLU 5632)
# with the demo's 4096-token tokenizer and a context of 128, trained briefly from scratch on the
# demo's data (scripts/demo-data.sh) — no weights can be downloaded here — then measured as
# bench/quantized_quality.sh measures the demo's model: perplexity on the demo's validation text
# and mean KL divergence from the unquantized bf16 model, for bf16, fp6, int8, q8_0 and q4.
#
# Its model states (bf16 weights, fp32 gradients, fp32 master weights and Adam's moments: 18 B a
# parameter, ~18 GiB) do not leave room on a 24 GiB machine for the rest, so the optimizer
# state lives on disk (ZeRO-Infinity's offload_optimizer to NVMe, docs/offload.md). The trained
# model is kept in demo-run/llama-1b/hf (4 GB) and not trained again while it is there.
# Needs ~20 GB free on the repository's disk during training.
# Usage: bench/quantized_quality_1b.sh [BUILD_BIN_DIR] [--iters N] [--max-tokens N]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR="${1:-build/bin}"
shift || true
ITERS=30
MAX_TOKENS=8192
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
RUN=demo-run
OUT="$RUN/llama-1b"
cmake --build build -j"$(nproc)" --target tessera-train tessera-preprocess tessera-eval-ppl \
  >/dev/null
bash scripts/demo-data.sh
if [ ! -f "$OUT/hf/config.json" ]; then
  mkdir -p "$OUT"
  SWAP="$(mktemp -d "$PWD/$OUT/swap.XXXXXX")"
  trap 'rm -rf "$SWAP"' EXIT
  # 32 sequences of 128 tokens a step; the learning rate warms up over 5 steps and decays
  # (cosine) to a tenth by the last.
  /usr/bin/time -v "$BIN_DIR/tessera-train" --model llama-1b --seq-length 128 \
    --max-position-embeddings 128 --data-path "$RUN/fortunes_text_document" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$RUN/tokenizer.json" \
    --split 95,5,0 --bf16 --zero-stage 1 --micro-batch-size 8 --global-batch-size 32 \
    --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 5 \
    --lr-decay-style cosine --lr-decay-iters "$ITERS" --weight-decay 0.1 --adam-beta2 0.95 \
    --clip-grad 1.0 --eval-interval "$ITERS" --eval-iters 8 --log-interval 1 \
    --num-threads "$(nproc)" --offload-optimizer-nvme-path "$SWAP" --offload-pipeline \
    --offload-sub-group-size 50000000 --offload-buffer-count 4 \
    --offload-fast-init --metrics-file "$OUT/metrics.jsonl" \
    --export-weights "$OUT/hf/model.safetensors" 2>"$OUT/time.txt" | tee "$OUT/train.log"
  grep -E "Maximum resident set size|Elapsed" "$OUT/time.txt"
fi
grep -E "^> model:|validation loss" "$OUT/train.log" | head -n 3 || true
QUALITY_MODEL="$OUT/hf" QUALITY_OUTPUT_LAYER=no \
  bash bench/quantized_quality.sh "$BIN_DIR" --max-tokens "$MAX_TOKENS"
