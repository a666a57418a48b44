#!/bin/bash
# Weight-only quantization's quality (docs/quantization.md): the demo's model (scripts/demo.sh;
# run first when demo-run/hf is missing) on the demo's validation text (its dataset's documents
# in --split 95,5,0's validation part), in bf16, unquantized and in every format:
# tessera-eval-ppl's perplexity and its mean KL divergence from the unquantized bf16 model.
# Usage: bench/quantized_quality.sh [BUILD_BIN_DIR] [extra tessera-eval-ppl flags]
# Environment: QUALITY_MODEL, another Hugging Face directory trained on the demo's data and
# tokenizer (bench/quantized_quality_1b.sh's ~1 B model); QUALITY_OUTPUT_LAYER, which output
# layer choices to run ("no yes", the default, or "no").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR="${1:-build/bin}"
shift || true
RUN=demo-run
MODEL="${QUALITY_MODEL:-$RUN/hf}"
[ -f "$MODEL/config.json" ] || [ -n "${QUALITY_MODEL:-}" ] || bash scripts/demo.sh
cmake --build build -j"$(nproc)" --target tessera-eval-ppl >/dev/null
lscpu | grep -E "^Model name" || true
EVAL=("$BIN_DIR/tessera-eval-ppl" --load "$MODEL" --tokenizer-type HuggingFaceTokenizer
  --tokenizer-model "$RUN/tokenizer.json" --data-path "$RUN/fortunes_text_document"
  --split 95,5,0 --split-part valid --dtype bf16 --json "$@")
echo "format | output layer | perplexity | mean KL divergence | same top token"
"${EVAL[@]}" | /usr/bin/python3 -c 'import json, sys
r = json.load(sys.stdin)
print("bf16 | - | {:.4f} | 0 | 100% ({} tokens)".format(r["ppl"], r["tokens"]))'
for fmt in fp6 int8 q8_0 q4; do
  for choice in ${QUALITY_OUTPUT_LAYER:-no yes}; do
    out=""
    [ "$choice" = yes ] && out=--quantize-output-layer
    "${EVAL[@]}" --quantize "$fmt" --kl-divergence $out | /usr/bin/python3 -c 'import json, sys
r = json.load(sys.stdin)
print("{} | {} | {:.4f} | {:.3e} | {:.2f}%".format(sys.argv[1], sys.argv[2], r["ppl"], r["kl_mean"], 100 * r["same_top"]))' \
      "$fmt" "$([ -n "$out" ] && echo yes || echo no)"
  done
done
