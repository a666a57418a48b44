#!/bin/bash
# Command-line test of tessera-convert and of --load with a Hugging Face directory
# (docs/huggingface.md):
#  - a checkpoint saved under TP 2 x DP 2 (ZeRO 1) -> Hugging Face -> Tessera -> Hugging Face gives
#    byte-identical model.safetensors: the round trip is bitwise for every weight;
#  - --max-shard-size shards the export with an index, which imports to the same weights;
#  - training from the Hugging Face directory (--load, config.json as the model) equals training
#    from the original checkpoint with --finetune, bitwise, in one process and under TP 2;
#  - tokenizer files travel with the conversions; bad input is one line and exit 2.
# Usage: convert.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: convert.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
CONVERT="$BIN_DIR/tessera-convert"
source "$(dirname "$0")/lib.bash" convert-test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$CONVERT" ] || { echo "FAIL: $CONVERT not found" >&2; exit 1; }

TRAIN=(--mock-data --lr 1e-3 --micro-batch-size 1 --global-batch-size 4 --eval-interval 0
       --log-interval 100 --num-threads 1)
FLAGS=("${TRAIN[@]}" --train-iters 2)
convert() { "$CONVERT" "$@" >"$TMP/out" 2>"$TMP/err"; }

for model in gpt2-tiny llama-tiny; do
  ck="$TMP/$model.ckpt"
  check "$model: a TP 2 x DP 2 ZeRO 1 checkpoint" \
    run 4 "${TRAIN[@]}" --model "$model" --train-iters 3 --tensor-model-parallel-size 2 \
    --zero-stage 1 --save "$ck"
  check "$model: tessera -> hf" convert --from tessera "$ck" --to hf "$TMP/$model.hf"
  check "  config.json and model.safetensors" \
    test -s "$TMP/$model.hf/config.json" -a -s "$TMP/$model.hf/model.safetensors"
  check "$model: hf -> tessera" convert --from hf "$TMP/$model.hf" --to tessera "$TMP/$model.rt"
  check "$model: tessera -> hf again" convert --from tessera "$TMP/$model.rt" --to hf "$TMP/$model.hf2"
  check "$model: the round trip is bitwise" \
    cmp "$TMP/$model.hf/model.safetensors" "$TMP/$model.hf2/model.safetensors"
  check "$model: sharded export" convert --from tessera "$ck/iter_0000003" --to hf \
    "$TMP/$model.sharded" --max-shard-size 60000
  check "  several files and an index" \
    test -s "$TMP/$model.sharded/model.safetensors.index.json" -a \
    "$(ls "$TMP/$model.sharded" | grep -c '^model-0.*-of-0.*\.safetensors$')" -ge 2
  check "  imports to the same weights" \
    convert --from hf "$TMP/$model.sharded" --to tessera "$TMP/$model.rt2"
  check "  (exported again: identical)" convert --from tessera "$TMP/$model.rt2" --to hf "$TMP/$model.hf3"
  check "  (bytes)" cmp "$TMP/$model.hf/model.safetensors" "$TMP/$model.hf3/model.safetensors"

  # Training from the Hugging Face directory (its config.json is the model; the HF config's
  # sequence length is its maximum positions, so --seq-length gives the preset's) equals
  # fine-tuning from the checkpoint it came from.
  seq=$(sed -n 's/.*"seq_length": \([0-9]*\).*/\1/p' "$ck/iter_0000003/metadata.json")
  check "$model: --load CHECKPOINT --finetune" run 1 "${FLAGS[@]}" --model "$model" --load "$ck" \
    --finetune --metrics-file "$TMP/$model.ft.jsonl"
  check "$model: --load HF_DIR" run 1 "${FLAGS[@]}" --seq-length "$seq" --load "$TMP/$model.hf" \
    --metrics-file "$TMP/$model.hfload.jsonl"
  check "  says it loaded Hugging Face weights" grep -q "loaded Hugging Face weights" "$TMP/out"
  check "  same losses, bitwise" diff <(cut -d, -f1-3 "$TMP/$model.ft.jsonl") \
    <(cut -d, -f1-3 "$TMP/$model.hfload.jsonl")
  check "$model: --load HF_DIR under TP 2" run 2 "${FLAGS[@]}" --seq-length "$seq" \
    --load "$TMP/$model.hf" --tensor-model-parallel-size 2 --metrics-file "$TMP/$model.tp2.jsonl"
  check "  trains the same model (first loss within 1e-6)" \
    awk -F'"lm_loss":' 'NR == FNR { split($2, a, ","); r = a[1]; next }
                        { split($2, b, ","); d = b[1] - r; exit !(d < 1e-6 && d > -1e-6) }' \
    <(head -1 "$TMP/$model.ft.jsonl") <(head -1 "$TMP/$model.tp2.jsonl")
  check "$model: --load of the converted release checkpoint (weights only, no flags needed)" \
    run 2 "${FLAGS[@]}" --model "$model" --load "$TMP/$model.rt" --pipeline-model-parallel-size 2
  check "  (the log says so)" grep -q "loaded weights (release checkpoint)" "$TMP/out"
done

# Mixtral (MixtralForCausalLM): an MoE checkpoint saved under DP 2 (ZeRO 1) -> Hugging Face ->
# Tessera -> Hugging Face is bitwise, and training from the Hugging Face directory equals
# fine-tuning from the checkpoint. A Mixtral config.json with a key Tessera does not know is refused.
model=mixtral-tiny
ck="$TMP/$model.ckpt"
check "$model: a DP 2 ZeRO 1 checkpoint" \
  run 2 "${TRAIN[@]}" --model "$model" --train-iters 3 --zero-stage 1 --save "$ck"
check "$model: tessera -> hf" convert --from tessera "$ck" --to hf "$TMP/$model.hf"
check "  config.json says MixtralForCausalLM with 8 experts, top 2" \
  grep -q '"num_local_experts": 8' "$TMP/$model.hf/config.json"
check "  (and the experts' names)" grep -q 'block_sparse_moe.experts.7.w3.weight' \
  "$TMP/$model.hf/model.safetensors"
check "$model: hf -> tessera" convert --from hf "$TMP/$model.hf" --to tessera "$TMP/$model.rt"
check "$model: tessera -> hf again" convert --from tessera "$TMP/$model.rt" --to hf "$TMP/$model.hf2"
check "$model: the round trip is bitwise" \
  cmp "$TMP/$model.hf/model.safetensors" "$TMP/$model.hf2/model.safetensors"
seq=$(sed -n 's/.*"seq_length": \([0-9]*\).*/\1/p' "$ck/iter_0000003/metadata.json")
check "$model: --load CHECKPOINT --finetune" run 1 "${FLAGS[@]}" --model "$model" --load "$ck" \
  --finetune --metrics-file "$TMP/$model.ft.jsonl"
check "$model: --load HF_DIR" run 1 "${FLAGS[@]}" --seq-length "$seq" --load "$TMP/$model.hf" \
  --metrics-file "$TMP/$model.hfload.jsonl"
check "  same losses, bitwise" diff <(cut -d, -f1-3 "$TMP/$model.ft.jsonl") \
  <(cut -d, -f1-3 "$TMP/$model.hfload.jsonl")
cp -r "$TMP/$model.hf" "$TMP/$model.bad"
sed -i 's/"num_local_experts": 8,/"num_local_experts": 8, "moe_layer_freq": 2,/' \
  "$TMP/$model.bad/config.json"

# A tokenizer trained by tessera-preprocess travels: training -> checkpoint -> Hugging Face
# directory -> --load HF_DIR, which tokenizes with it (--eod-mask-loss needs its EOD id).
mkdir -p "$TMP/tok"
for i in $(seq 1 60); do echo "{\"text\": \"document $i has $((i % 7)) words about pears\"}"; done \
  >"$TMP/tok/corpus.jsonl"
"$BIN_DIR/tessera-preprocess" --input "$TMP/tok/corpus.jsonl" --output-prefix "$TMP/tok/d" \
  --append-eod --train-tokenizer --vocab-size 300 >/dev/null
DATA=(--data-path "$TMP/tok/d_text_document" --data-cache-path "$TMP/tok/cache" --lr 1e-3
      --micro-batch-size 1 --global-batch-size 2 --eval-interval 0 --num-threads 1 --train-iters 2)
check "training with a tokenizer.json saves it in the checkpoint" \
  run 1 "${DATA[@]}" --model gpt2-tiny --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$TMP/tok/tokenizer.json" --save "$TMP/tok/ck"
check "  (iter_0000002/tokenizer.json)" cmp "$TMP/tok/tokenizer.json" "$TMP/tok/ck/iter_0000002/tokenizer.json"
check "  tessera -> hf carries it" convert --from tessera "$TMP/tok/ck" --to hf "$TMP/tok/hf"
check "  (hf/tokenizer.json)" cmp "$TMP/tok/tokenizer.json" "$TMP/tok/hf/tokenizer.json"
check "--load HF_DIR tokenizes with its tokenizer.json" \
  run 1 "${DATA[@]}" --load "$TMP/tok/hf" --seq-length 64 --eod-mask-loss

echo '{"version": "1.0", "model": {"type": "BPE"}}' >"$TMP/gpt2-tiny.hf/tokenizer.json"
check "tokenizer.json travels hf -> tessera -> hf" \
  bash -c "'$CONVERT' --from hf '$TMP/gpt2-tiny.hf' --to tessera '$TMP/tok.rt' >/dev/null &&
           '$CONVERT' --from tessera '$TMP/tok.rt' --to hf '$TMP/tok.hf' >/dev/null &&
           cmp '$TMP/gpt2-tiny.hf/tokenizer.json' '$TMP/tok.hf/tokenizer.json'"

# convert_error PATTERN ARGS...: exit 2 and exactly one stderr line matching "tessera-convert: PATTERN".
convert_error() {
  local pattern="$1"
  shift
  convert "$@"
  local code=$?
  [ $code -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "^tessera-convert: $pattern" "$TMP/err" || {
    echo "  exit $code; stderr:" >&2
    sed 's/^/    /' "$TMP/err" >&2
    return 1
  }
}
check "an unknown direction" convert_error ".*expected --from tessera DIR --to hf OUT" \
  --from hf "$TMP/x" --to hf "$TMP/y"
check "an unknown MixtralConfig key: one line naming it, exit 2" \
  convert_error ".*key 'moe_layer_freq': unknown MixtralConfig key" --from hf "$TMP/mixtral-tiny.bad" \
  --to tessera "$TMP/y"
check "no checkpoint" convert_error ".*no checkpoint there" --from tessera "$TMP/none" --to hf "$TMP/y"
cp -r "$TMP/llama-tiny.hf" "$TMP/broken.hf"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$TMP/broken.hf/config.json"
check "config and weights disagree: the missing tensor is named" \
  convert_error ".*model.layers.2.* missing\|.*model.layers.2.*" --from hf "$TMP/broken.hf" --to tessera "$TMP/y"

echo "convert: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
