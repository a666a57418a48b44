#!/bin/bash
# Command-line test of the Hugging Face families Llama 3.x, Qwen2 and Mistral against an
# independent reference (docs/huggingface.md, "The families against a reference"):
#  - a random checkpoint per family is written by numpy from tests/data/hf_expected/<family>.json
#    (config and tensor names/shapes), not by Tessera;
#  - tessera-logits' logits for 24 tokens equal tests/cli/hf_reference.py's float64 forward of the
#    architecture within 1e-5, and that forward moves by far more without the family's own part
#    (rope scaling, q/k/v biases, the window of 4 tokens);
#  - hf -> tessera -> hf keeps every tensor's bytes; a second round trip gives byte-identical
#    config.json and model.safetensors, and the same logits bit for bit;
#  - tessera-train --load trains the Mistral directory two iterations (window < --seq-length),
#    with the same losses and grad norms under context parallelism a2a (2 ranks).
# Usage: hf_families.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: hf_families.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
CONVERT="$BIN_DIR/tessera-convert"
LOGITS="$BIN_DIR/tessera-logits"
HERE="$(cd "$(dirname "$0")" && pwd)"
REF="$HERE/hf_reference.py"
FIXTURES="$HERE/../data/hf_expected"
source "$HERE/lib.bash" hf-families
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for tool in "$CONVERT" "$LOGITS"; do [ -x "$tool" ] || { echo "FAIL: $tool not found" >&2; exit 1; }; done

TOKENS=5,17,200,3,99,42,7,256,0,13,128,64,31,250,8,77,1,150,222,9,45,180,2,111
quiet() { "$@" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err" >&2; return 1; }; }

seed=1
for family in llama3-tiny qwen2-tiny mistral-tiny; do
  d="$TMP/$family"
  mkdir -p "$d/hf"
  seed=$((seed + 1))
  check "$family: numpy writes the checkpoint" \
    /usr/bin/python3 "$REF" make "$FIXTURES/$family.json" "$d/hf" "$seed"
  check "$family: tessera-logits" quiet "$LOGITS" --load "$d/hf" --tokens "$TOKENS" --out "$d/logits"
  # Tessera's forward is fp32 (accumulation order, fp32 RoPE angles), the reference float64:
  # measured 3.2e-6 to 5.3e-6 at these logits (largest |logit| ~3), about 1e-6 relative.
  check "$family: logits equal the float64 reference within 1e-5" \
    /usr/bin/python3 "$REF" compare "$d/hf" "$TOKENS" "$d/logits" 1e-5
  check "$family: hf -> tessera" quiet "$CONVERT" --from hf "$d/hf" --to tessera "$d/ck1"
  check "$family: tessera -> hf" quiet "$CONVERT" --from tessera "$d/ck1" --to hf "$d/out1"
  check "$family: every tensor's bytes survive the round trip" \
    /usr/bin/python3 "$REF" same-tensors "$d/hf/model.safetensors" "$d/out1/model.safetensors"
  check "$family: hf -> tessera again" quiet "$CONVERT" --from hf "$d/out1" --to tessera "$d/ck2"
  check "$family: tessera -> hf again" quiet "$CONVERT" --from tessera "$d/ck2" --to hf "$d/out2"
  check "$family: model.safetensors byte-identical" cmp "$d/out1/model.safetensors" "$d/out2/model.safetensors"
  check "$family: config.json byte-identical" cmp "$d/out1/config.json" "$d/out2/config.json"
  check "$family: tessera-logits of the export" \
    quiet "$LOGITS" --load "$d/out2" --tokens "$TOKENS" --out "$d/logits2"
  check "$family: the same logits, bitwise" cmp "$d/logits" "$d/logits2"
done
grep -q '"model_type": "qwen2"' "$TMP/qwen2-tiny/out2/config.json" &&
  grep -q '"sliding_window": 4' "$TMP/mistral-tiny/out2/config.json" &&
  grep -q '"rope_type": "llama3"' "$TMP/llama3-tiny/out2/config.json"
check "each export says its family" test $? -eq 0

FLAGS=(--mock-data --lr 1e-3 --micro-batch-size 1 --global-batch-size 1 --eval-interval 0
       --log-interval 1 --num-threads 1 --train-iters 2 --seq-length 16)
check "mistral: tessera-train --load trains with the window" \
  run 1 "${FLAGS[@]}" --load "$TMP/mistral-tiny/hf"
check "  from the Hugging Face weights" grep -q "loaded Hugging Face weights" "$TMP/out"
losses() { grep -o "lm loss: [^|]*| loss scale: [^|]*| grad norm: [^|]*" "$1"; }
losses "$TMP/out" >"$TMP/np1.losses"
check "mistral: the same under --context-parallel-size 2 --cp-comm-type a2a" \
  run 2 "${FLAGS[@]}" --load "$TMP/mistral-tiny/hf" --context-parallel-size 2 --cp-comm-type a2a
losses "$TMP/out" >"$TMP/a2a.losses"
check "  equal losses and grad norms" cmp "$TMP/np1.losses" "$TMP/a2a.losses"
check "  (two iterations logged)" test "$(wc -l <"$TMP/np1.losses")" -eq 2

echo "hf_families: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
