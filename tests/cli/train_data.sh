#!/bin/bash
# Command-line test of tessera-train's data pipeline on files made by tessera-preprocess:
# --data-path (one prefix, weighted and unweighted blends), per-split paths, the index cache
# (written once, read by later runs), the test pass at the end, --eod-mask-loss / --reset-position-ids /
# --reset-attention-mask on GPT-2 and LLaMA, the data wait in the log line, layout invariance
# of a blended run with the document flags at TP 2 and DP 2, and bad data flags (exit 2, one
# line). Usage: train_data.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: train_data.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
source "$(dirname "$0")/lib.bash" train-data-test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }

# Two corpora with EOD after every document: short numbered lines, and longer repeated words.
for i in $(seq 1 300); do echo "{\"text\": \"line $i of the first corpus: $((i * 7 % 13)) apples\"}"; done \
  > "$TMP/a.jsonl"
for i in $(seq 1 120); do echo "{\"text\": \"$(printf 'word%d ' $(seq $i $((i + 20))))\"}"; done \
  > "$TMP/b.jsonl"
"$BIN_DIR/tessera-preprocess" --input "$TMP/a.jsonl" --output-prefix "$TMP/a" --append-eod >/dev/null
"$BIN_DIR/tessera-preprocess" --input "$TMP/b.jsonl" --output-prefix "$TMP/b" --append-eod >/dev/null
A="$TMP/a_text_document"
B="$TMP/b_text_document"

BASE=(--model gpt2-tiny --tokenizer-type ByteLevel --train-iters 4 --lr 1e-3
      --micro-batch-size 2 --global-batch-size 4 --eval-interval 2 --eval-iters 1
      --log-interval 1 --num-threads 1)
FLAGS=("${BASE[@]}" --data-cache-path "$TMP/cache")

check "one prefix trains" run 1 "${FLAGS[@]}" --data-path "$A"
check "the log line reports the data wait" grep -q "data wait (ms): " "$TMP/out"
check "validation runs" grep -q "validation loss at iteration 4" "$TMP/out"
check "train and valid indices are cached" \
  [ "$(ls "$TMP/cache" | grep -c -- '-GPTDataset-\(train\|valid\)-.*\.npy$')" -eq 6 ]
touch "$TMP/after-first-run"
sleep 1
check "a second run trains" run 1 "${FLAGS[@]}" --data-path "$A"
check "the second run reads the cache (no file rewritten)" \
  [ -z "$(find "$TMP/cache" -newer "$TMP/after-first-run")" ]
check "a different seed builds new indices" run 1 "${FLAGS[@]}" --data-path "$A" --seed 7
check "  (6 more files)" \
  [ "$(ls "$TMP/cache" | grep -c -- '-GPTDataset-\(train\|valid\)-.*\.npy$')" -eq 12 ]

check "the default cache sits next to the data" run 1 "${BASE[@]}" --data-path "$A"
check "  in PREFIX/cache/GPTDataset_indices" [ -d "$A/cache/GPTDataset_indices" ]

# loss_at ITER: the lm loss of iteration ITER in the last run's log.
loss_at() { sed -n "s/^ iteration *$1\/.*| lm loss: \([^ ]*\) |.*/\1/p" "$TMP/out"; }
# trained_on PREFIXES: the last run reached its last iteration (4) with a finite loss, and its
# data line names PREFIXES prefixes.
trained_on() {
  grep -q "^> data: --data-path $1 prefix(es)" "$TMP/out" &&
    [[ "$(loss_at 4)" =~ ^[0-9]\.[0-9]{6}E[+-][0-9]{2}$ ]]
}
# differs A B / close A B: two printed losses differ / agree to 1e-5 relative.
differs() { [ -n "$1" ] && [ -n "$2" ] && [ "$1" != "$2" ]; }
close() {
  [ -n "$1" ] && [ -n "$2" ] &&
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b + 0 != 0 && d <= 1e-5 * b) }'
}

check "one prefix trains (the reference of the blends)" run 1 "${FLAGS[@]}" --data-path "$A"
loss_a=$(loss_at 1)
check "a weighted blend trains" run 1 "${FLAGS[@]}" --data-path 0.3 "$A" 0.7 "$B"
check "  on both prefixes to the last iteration" trained_on 2
loss_weighted=$(loss_at 1)
check "  and its first batch is not the single corpus's" differs "$loss_weighted" "$loss_a"
check "  and caches its blending indices" \
  [ "$(ls "$TMP/cache" | grep -c -- '-BlendedDataset-train-.*\.npy$')" -eq 2 ]
check "an unweighted blend trains" run 1 "${FLAGS[@]}" --data-path "$A" "$B"
check "  on both prefixes to the last iteration" trained_on 2
check "  with other weights than the 0.3/0.7 blend" differs "$(loss_at 1)" "$loss_weighted"
per_split() {
  run 1 "${FLAGS[@]}" --train-data-path "$A" --valid-data-path "$B" || return 1
  # The validation set is B: its loss differs from the validation on A's own split.
  local val_b val_a
  val_b=$(sed -n 's/^ validation loss at iteration 4 | lm loss value: \([^ ]*\) .*/\1/p' "$TMP/out")
  run 1 "${FLAGS[@]}" --data-path "$A" || return 1
  val_a=$(sed -n 's/^ validation loss at iteration 4 | lm loss value: \([^ ]*\) .*/\1/p' "$TMP/out")
  differs "$val_b" "$val_a"
}
check "per-split paths train and validate on the valid path" per_split
for model in gpt2-tiny llama-tiny; do
  run 1 "${FLAGS[@]/gpt2-tiny/$model}" --data-path "$A"
  plain=$(loss_at 1)
  check "$model trains with the document flags" run 1 "${FLAGS[@]/gpt2-tiny/$model}" \
    --data-path "$A" --eod-mask-loss --reset-position-ids --reset-attention-mask
  check "  and they change its loss (EOD tokens masked, positions reset)" differs "$(loss_at 1)" "$plain"
done
check "one process trains on a 0.5/0.5 blend (the DP 2 reference)" \
  run 1 "${FLAGS[@]}" --data-path 0.5 "$A" 0.5 "$B"
loss_dp1=$(loss_at 4)
check "DP 2 trains on a blend" run 2 "${FLAGS[@]}" --data-path 0.5 "$A" 0.5 "$B"
check "  to the one-process loss at iteration 4" close "$(loss_at 4)" "$loss_dp1"
test_pass() {
  run 1 "${FLAGS[@]}" --data-path "$A" --split 80,10,10 || return 1
  [ "$(grep -c '^ validation loss at iteration 4 on test set | lm loss value: ' "$TMP/out")" -eq 1 ]
}
check "a test split is evaluated once, after the last iteration" test_pass

# The same blended run with the document flags, one process against TP 2 and against DP 2:
# every layout must see the same samples, masks and positions.
for layout in "--tensor-model-parallel-size 2 --sequence-parallel" ""; do
  check "layout invariance with --reset-attention-mask etc. (np 2 '$layout')" \
    bash "$(dirname "$0")/../../scripts/invariance.sh" --bin "$BIN_DIR" --np 2 --layout "$layout" -- \
      --model llama-tiny --tokenizer-type ByteLevel --data-path 0.4 "$A" 0.6 "$B" \
      --data-cache-path "$TMP/cache" --eod-mask-loss --reset-position-ids --reset-attention-mask \
      --lr 1e-3 --adam-eps 1e-6 --train-iters 4 --micro-batch-size 2 --global-batch-size 4 \
      --eval-interval 2 --eval-iters 1 --log-interval 1 --num-threads 1
done

FLAGS=(--model gpt2-tiny --tokenizer-type ByteLevel --train-iters 1 --lr 1e-3 --num-threads 1
       --data-cache-path "$TMP/cache")
check "malformed --split" expect_error 1 "--split '90,x'" --data-path "$A" --split 90,x
check "negative --split weight" expect_error 1 "--split '90,-10'" --data-path "$A" --split 90,-10
check "negative blend weight" expect_error 1 "--data-path: weight '-0.7'" --data-path 0.3 "$A" -0.7 "$B"
check "malformed blend weight" expect_error 1 "--data-path: expected either prefixes" \
  --data-path 0.3 "$A" x "$B"
check "odd weighted list" expect_error 1 "--data-path: expected either prefixes" --data-path 0.3 "$A" "$B"
check "missing data path" expect_error 1 ".*$TMP/nothing" --data-path "$TMP/nothing"
check "missing second prefix of a blend" expect_error 1 ".*$TMP/nothing" --data-path 1 "$A" 1 "$TMP/nothing"
check "both --data-path and --train-data-path" expect_error 1 "--data-path and --train-data-path" \
  --data-path "$A" --train-data-path "$A"
FLAGS=(--num-threads 1)
check "document flags without a tokenizer" expect_error 1 "--eod-mask-loss.*--tokenizer-type" \
  --model gpt2-tiny --train-iters 1 --lr 1e-3 --data-path "$A" --eod-mask-loss

echo "train_data: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
