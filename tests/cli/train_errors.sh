#!/bin/bash
# Command-line test of tessera-train's handling of bad input: every case must print exactly one
# line on stderr naming the flag/key/file at fault and exit with code 2, without training.
# Usage: train_errors.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: train_errors.sh BUILD_BIN_DIR}/tessera-train"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tessera-train-errors.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
OK_FLAGS=(--model gpt2-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 2
          --global-batch-size 2 --num-threads 1)

# expect_error NAME EXPECTED_SUBSTRING ARGS...: exit code 2, one stderr line containing the text.
expect_error() {
  local name="$1" expected="$2"
  shift 2
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$code" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$expected" "$TMP/err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: exit $code, $lines stderr lines, expected '$expected' in:" >&2
    sed 's/^/    /' "$TMP/err" >&2
  fi
}

[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }

expect_error "unknown flag" "--no-such-flag" "${OK_FLAGS[@]}" --no-such-flag 3
expect_error "unknown preset" "unknown preset 'gpt5'" --model gpt5 --mock-data --train-iters 1 --lr 1
expect_error "heads do not divide hidden" "--num-attention-heads" "${OK_FLAGS[@]}" --hidden-size 64 --num-attention-heads 5
expect_error "query groups do not divide heads" "--num-query-groups" "${OK_FLAGS[@]}" --group-query-attention --num-query-groups 3
expect_error "bad number" "--hidden-size" "${OK_FLAGS[@]}" --hidden-size abc
expect_error "bad enum" "--normalization" "${OK_FLAGS[@]}" --normalization BatchNorm
expect_error "missing data file" "$TMP/nothing" --model gpt2-tiny --data-path "$TMP/nothing" --train-iters 1 --lr 1e-3
expect_error "GBS not divisible by MBS" "--global-batch-size 10 is not divisible by --micro-batch-size 4" \
  --model gpt2-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 4 --global-batch-size 10
expect_error "fp16 with bf16" "--fp16 and --bf16" "${OK_FLAGS[@]}" --fp16 --bf16
# The kernel target: an unknown TESSERA_CPU_TARGET is one line and exit 2 before anything runs;
# --version names the target in use, and a cap the build has not got falls back with a warning.
TESSERA_CPU_TARGET=avx-512 expect_error "unknown TESSERA_CPU_TARGET" \
  "TESSERA_CPU_TARGET=avx-512: unknown kernel target; expected one of baseline, avx2" "${OK_FLAGS[@]}"
if "$BIN" --version >"$TMP/out" 2>"$TMP/err" && grep -q "^tessera .*: kernels [a-z0-9]* (cpu best: " "$TMP/out" &&
   TESSERA_CPU_TARGET=baseline "$BIN" --version 2>/dev/null | grep -q ": kernels baseline (cpu best: .*capped by TESSERA_CPU_TARGET=baseline" &&
   TESSERA_CPU_TARGET=sve "$BIN" --version 2>&1 >/dev/null | grep -q "TESSERA_CPU_TARGET=sve not available (this build has no SVE kernels)"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: --version does not name the kernel target, or TESSERA_CPU_TARGET is not honoured" >&2
fi
echo '{"num-layers": 2, "hidden_sise": 64}' >"$TMP/bad_key.json"
expect_error "config key that is not a flag" "'hidden-sise' is not a tessera-train flag" \
  "${OK_FLAGS[@]}" --config "$TMP/bad_key.json"
echo '{"num-layers": 2,' >"$TMP/bad_json.json"
expect_error "config that is not JSON" "--config" "${OK_FLAGS[@]}" --config "$TMP/bad_json.json"
expect_error "no train length" "--train-iters or --train-samples" --model gpt2-tiny --mock-data --lr 1
expect_error "no data" "--data-path PREFIX or --mock-data" --model gpt2-tiny --train-iters 1 --lr 1

expect_error "no --lr" "--lr is required" --model gpt2-tiny --mock-data --train-iters 1
expect_error "split with junk" "--split '98abc,2'" "${OK_FLAGS[@]}" --split 98abc,2
expect_error "split with four weights" "more than three weights" "${OK_FLAGS[@]}" --split 90,10,0,50
expect_error "unwritable export path" "--export-weights /proc/nonexistent/model.safetensors" \
  "${OK_FLAGS[@]}" --export-weights /proc/nonexistent/model.safetensors
expect_error "export of a config Transformers cannot load" "--normalization" \
  "${OK_FLAGS[@]}" --position-embedding-type rope --export-weights "$TMP/out/model.safetensors"
expect_error "GQA in GPT-2 export" "--group-query-attention" "${OK_FLAGS[@]}" \
  --group-query-attention --num-query-groups 2 --export-weights "$TMP/out/model.safetensors"

expect_error "fp16 overflow at the minimum loss scale" "iteration 2: Current loss scale already at minimum (1024)" \
  --model gpt2-tiny --mock-data --lr 1e-3 --num-threads 1 --train-iters 3 --fp16 --initial-loss-scale 1024 --min-loss-scale 1024 \
  --hysteresis 1 --inject-overflow-at-iteration 2

# A token outside the vocabulary is found when the data is opened, not when it is first read.
printf 'hello world, a document\n\nand another one\n' >"$TMP/tiny.txt"
"$(dirname "$BIN")/tessera-preprocess" --input "$TMP/tiny.txt" --input-format text \
  --output-prefix "$TMP/tiny" --tokenizer-type ByteLevel >/dev/null 2>&1
expect_error "token outside the vocabulary" "is outside the vocabulary [0, 100)" --model gpt2-tiny \
  --data-path "$TMP/tiny_text_document" --vocab-size 100 --seq-length 4 --train-iters 1 --lr 1e-3

# Boolean model flags honour false, on the command line and in --config.
echo '{"swiglu": false, "untie_embeddings_and_output_weights": false}' >"$TMP/false.json"
for extra in "--config $TMP/false.json" "--swiglu=false"; do
  # shellcheck disable=SC2086
  if "$BIN" "${OK_FLAGS[@]}" $extra --eval-iters 0 >"$TMP/out" 2>&1 && grep -q "GPT-2 family" "$TMP/out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: false boolean ($extra) switched a feature on:" >&2
    sed 's/^/    /' "$TMP/out" >&2
  fi
done

# Mixture of Experts: impossible routing and malformed MoE options.
MOE_FLAGS=(--model mixtral-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 2
           --global-batch-size 2 --num-threads 1)
expect_error "moe: top-k above the experts" "--moe-router-topk 9 must be between 1 and --num-experts 8" \
  "${MOE_FLAGS[@]}" --moe-router-topk 9
expect_error "moe: capacity factor <= 0" "--moe-expert-capacity-factor" "${MOE_FLAGS[@]}" \
  --moe-expert-capacity-factor 0
expect_error "moe: layer list of the wrong length" "--moe-layer-freq: '[1,0,1]': the list has 3 entries, --num-layers is 2" \
  "${MOE_FLAGS[@]}" --moe-layer-freq "[1,0,1]"
expect_error "moe: layer list entries" "list entries must be 0 or 1" "${MOE_FLAGS[@]}" \
  --moe-layer-freq "[1,2]"
expect_error "moe: sigmoid with pre-softmax" "--moe-router-pre-softmax goes with --moe-router-score-function softmax only" \
  "${MOE_FLAGS[@]}" --moe-router-score-function sigmoid --moe-router-pre-softmax
expect_error "moe: expert bias without sigmoid" "--moe-router-enable-expert-bias" "${MOE_FLAGS[@]}" \
  --moe-router-enable-expert-bias
expect_error "moe: unknown score function" "--moe-router-score-function" "${MOE_FLAGS[@]}" \
  --moe-router-score-function sparsemax
expect_error "moe: padding without a capacity" "--moe-pad-expert-input-to-capacity" "${MOE_FLAGS[@]}" \
  --moe-pad-expert-input-to-capacity

# A config file supplies flags; the command line wins over it.
echo '{"num_layers": 3, "hidden-size": 48, "num-attention-heads": 6}' >"$TMP/good.json"
if "$BIN" "${OK_FLAGS[@]}" --config "$TMP/good.json" --hidden-size 96 --eval-iters 0 >"$TMP/out" 2>&1 &&
   grep -q "3 layers, hidden 96, heads 6/6" "$TMP/out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: --config values with command-line override:" >&2
  sed 's/^/    /' "$TMP/out" >&2
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
