#!/usr/bin/env bash
# The demo: installs what is needed, builds, trains a byte-level BPE tokenizer on the `fortunes`
# package's English text and turns the text into a Megatron indexed dataset with it, then trains
# a small LLaMA-style model (RMSNorm, RoPE, SwiGLU, GQA, bf16) for about three minutes, printing
# progress. At the end it compares the validation loss with the unigram entropy of the data:
# both are in nats per BPE token of the same tokenization, so a model that learned nothing
# beyond token frequencies cannot go below that line. Last, the trained model writes a few lines
# of its own (tessera-generate, docs/inference.md).
# Usage: scripts/demo.sh [extra tessera-train flags, e.g. --exit-duration-in-mins 10]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target tessera-train tessera-preprocess tessera-generate

bash scripts/demo-data.sh
out=demo-run

./build/bin/tessera-train --config examples/demo_llama.json \
  --data-path "$out/fortunes_text_document" \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$out/tokenizer.json" \
  --metrics-file "$out/metrics.jsonl" --export-weights "$out/hf/model.safetensors" "$@" \
  | tee "$out/train.log"

entropy=$(grep -o 'unigram entropy of the training data: [0-9.]*' "$out/train.log" | head -n 1 |
  awk '{print $NF}')
val=$(grep -o '"val_loss":[0-9.eE+-]*' "$out/metrics.jsonl" | tail -n 1 | cut -d: -f2)
# Bytes of text per token (uint16 tokens, EODs included): the losses per byte, comparable with
# a byte-level run's.
bytes_per_token=$(awk -v b="$(stat -c %s "$out/fortunes.txt")" \
  -v t="$(stat -c %s "$out/fortunes_text_document.bin")" 'BEGIN { printf "%.4f", b / (t / 2) }')
if [ -n "$val" ] && [ -n "$entropy" ]; then
  awk -v v="$val" -v h="$entropy" -v r="$bytes_per_token" 'BEGIN {
    printf "demo: last validation loss %.3f nats/token vs %.3f for the unigram entropy of the data'"'"'s BPE tokens (%.0f%%); per byte of text (%.2f bytes/token): %.3f vs %.3f nats\n", v, h, 100 * v / h, r, v / r, h / r }'
fi

# A sample of the trained model's text, from its exported Hugging Face directory.
echo "demo: the trained model continues \"Q:\" (tessera-generate, temperature 0.8, seed 1):"
./build/bin/tessera-generate --load "$out/hf" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$out/tokenizer.json" --prompt "Q:" --max-tokens 80 --temperature 0.8 \
  --top-p 0.95 --seed 1
