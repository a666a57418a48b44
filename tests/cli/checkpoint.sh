#!/bin/bash
# Command-line test of tessera-train's checkpoints (docs/checkpoints.md):
#  - exact resume: 20 iterations straight equal 10, save, a new job loads, 10 more, bitwise
#    (losses, gradient norms, learning rates, validation losses) in fp32 and bf16 with dropout
#    on, on a dataset the run goes through more than once (the save falls mid-epoch), in one
#    process and under TP 2 x DP 2 with ZeRO 2, synchronous and --async-save;
#  - --keep-checkpoints, --finetune, --no-load-optim, --no-save-optim, --no-load-rng;
#  - crash safety: a rank killed in the middle of a save leaves the previous checkpoint loadable
#    and the pointer on it;
#  - damaged or incompatible checkpoints: one line naming the file and tensor, exit 2.
# Usage: checkpoint.sh BUILD_BIN_DIR [--resume-only]
#   --resume-only: just the exact-resume runs in one process (fp32, bf16, fp16) and at TP 2 x
#   DP 2 ZeRO 2 (bf16), for the repeat under a capped CPU target (tests/CMakeLists.txt).
BIN_DIR="${1:?usage: checkpoint.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
source "$(dirname "$0")/lib.bash" checkpoint-test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }

# A small corpus: 20 iterations of 4 samples of 64 tokens read it about twice.
for i in $(seq 1 90); do echo "{\"text\": \"document $i says $((i * 7 % 13)) things about $((i % 5)) apples\"}"; done \
  >"$TMP/corpus.jsonl"
"$BIN_DIR/tessera-preprocess" --input "$TMP/corpus.jsonl" --output-prefix "$TMP/c" --append-eod \
  >/dev/null
FLAGS=(--model gpt2-tiny --tokenizer-type ByteLevel --data-path "$TMP/c_text_document"
       --data-cache-path "$TMP/cache" --split 90,10,0 --lr 1e-3 --lr-decay-style cosine
       --lr-warmup-iters 1 --micro-batch-size 2 --global-batch-size 4 --eval-interval 5
       --eval-iters 1 --log-interval 100 --num-threads 1)

# The run's numbers without the timings.
numbers() {
  sed -E 's/"(iter_time_s|tokens_per_s|tflops_per_rank|peak_mem_bytes|data_wait_s|gemm_s)":[^,}]*,?//g' "$@"
}

# resume NAME NP "LAYOUT" EXTRA...: straight run, then 10 + save / load + 10; bitwise equal.
resume() {
  local name="$1" np="$2" layout="$3"
  shift 3
  # shellcheck disable=SC2086
  run "$np" "${FLAGS[@]}" --train-iters 20 $layout "$@" \
    --metrics-file "$TMP/$name.straight.jsonl" || return 1
  # shellcheck disable=SC2086
  run "$np" "${FLAGS[@]}" --train-iters 20 $layout "$@" --exit-interval 10 \
    --save "$TMP/$name.ckpt" --metrics-file "$TMP/$name.first.jsonl" || return 1
  # shellcheck disable=SC2086
  run "$np" "${FLAGS[@]}" --train-iters 20 $layout "$@" --load "$TMP/$name.ckpt" \
    --metrics-file "$TMP/$name.second.jsonl" || return 1
  grep -q "loaded weights, optimizer state, data position and seed" "$TMP/out" || return 1
  cat "$TMP/$name.first.jsonl" "$TMP/$name.second.jsonl" >"$TMP/$name.resumed.jsonl"
  [ "$(wc -l <"$TMP/$name.resumed.jsonl")" -eq 20 ] || return 1
  diff <(numbers "$TMP/$name.straight.jsonl") <(numbers "$TMP/$name.resumed.jsonl") >&2
}
# One epoch holds N samples (a two-iteration run builds one epoch): 40 < N < 80 puts the save
# (after 40 samples) inside the first epoch and the end (80) in the second.
mid_epoch() {
  run 1 "${FLAGS[@]}" --train-iters 2 || return 1
  local n
  n=$(sed -n 's/.*; train \([0-9]*\) samples.*/\1/p' "$TMP/out")
  [ -n "$n" ] && [ "$n" -gt 40 ] && [ "$n" -lt 80 ]
}
check "the save at iteration 10 falls mid-epoch, the run crosses into a second epoch" mid_epoch
check "exact resume, fp32, one process" resume fp32 1 ""
check "exact resume, bf16, one process" resume bf16 1 "" --bf16
if [ "${2:-}" = "--resume-only" ]; then
  check "exact resume, fp16, one process" resume fp16 1 "" --fp16
  check "exact resume, bf16, TP 2 x DP 2 ZeRO 2" \
    resume tp2dp2 4 "--tensor-model-parallel-size 2 --zero-stage 2" --bf16
  echo "checkpoint (resume only): $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi
# --async-save: background saves every 3 iterations while training goes on (3, 6, 9, and 10 at
# the exit); the job resumed from the last one continues the straight bf16 run bitwise.
async_resume() {
  run 1 "${FLAGS[@]}" --train-iters 20 --bf16 --exit-interval 10 --save "$TMP/async.ckpt" \
    --save-interval 3 --async-save --metrics-file "$TMP/async.first.jsonl" || return 1
  [ "$(grep -c "training paused .* for the snapshot (--async-save)" "$TMP/out")" -eq 4 ] || return 1
  run 1 "${FLAGS[@]}" --train-iters 20 --bf16 --load "$TMP/async.ckpt" \
    --metrics-file "$TMP/async.second.jsonl" || return 1
  diff <(numbers "$TMP/bf16.straight.jsonl") \
    <(cat "$TMP/async.first.jsonl" "$TMP/async.second.jsonl" | numbers) >&2
}
check "exact resume, bf16, from background saves (--async-save)" async_resume
# The same at TP 2 x DP 2: the ranks agree after every iteration whether all have written.
async_resume_tp2dp2() {
  local layout=(--tensor-model-parallel-size 2 --zero-stage 2 --bf16)
  run 4 "${FLAGS[@]}" "${layout[@]}" --train-iters 20 --exit-interval 10 \
    --save "$TMP/async4.ckpt" --save-interval 3 --async-save --metrics-file "$TMP/async4.first.jsonl" ||
    return 1
  run 4 "${FLAGS[@]}" "${layout[@]}" --train-iters 20 --load "$TMP/async4.ckpt" \
    --metrics-file "$TMP/async4.second.jsonl" || return 1
  diff <(numbers "$TMP/tp2dp2.straight.jsonl") \
    <(cat "$TMP/async4.first.jsonl" "$TMP/async4.second.jsonl" | numbers) >&2
}
check "exact resume, bf16, TP 2 x DP 2 ZeRO 2" \
  resume tp2dp2 4 "--tensor-model-parallel-size 2 --zero-stage 2" --bf16
check "exact resume, bf16, from background saves at TP 2 x DP 2 ZeRO 2" async_resume_tp2dp2
check "exact resume, fp32, PP 2 x DP 2 ZeRO 1 (tied embedding split)" \
  resume pp2dp2 4 "--pipeline-model-parallel-size 2 --zero-stage 1"
# fp16: the loss scaler halves at the injected overflow (iteration 3) and the resumed job must
# continue from the halved scale, not from --initial-loss-scale.
check "exact resume, fp16 with the dynamic loss scaler" \
  resume fp16 1 "" --fp16 --initial-loss-scale 1024 --hysteresis 1 --inject-overflow-at-iteration 3
check "  (the scale was halved before the save)" grep -q '"iteration":11,.*"loss_scale":512' \
  "$TMP/fp16.second.jsonl"

# GPT-2 with one key/value group at TP 2: the fused q/k/v weight holds query rows only this rank
# has next to key/value rows both ranks hold; the save must write the first and one copy of the
# second, so that one process can load it and continue (to 1e-5 of the TP 2 run: sum order).
gqa_fused() {
  local gqa=(--group-query-attention --num-query-groups 1)
  run 2 "${FLAGS[@]}" "${gqa[@]}" --train-iters 12 --tensor-model-parallel-size 2 \
    --metrics-file "$TMP/gqa.straight.jsonl" || return 1
  run 2 "${FLAGS[@]}" "${gqa[@]}" --train-iters 12 --tensor-model-parallel-size 2 \
    --exit-interval 10 --save "$TMP/gqa.ckpt" || return 1
  run 1 "${FLAGS[@]}" "${gqa[@]}" --train-iters 12 --load "$TMP/gqa.ckpt" \
    --metrics-file "$TMP/gqa.second.jsonl" || return 1
  awk -F'"lm_loss":' 'NR == FNR { split($2, a, ","); ref[FNR] = a[1]; next }
    { split($2, b, ","); d = (b[1] - ref[FNR + 10]) / ref[FNR + 10]; if (d > 1e-5 || d < -1e-5) bad = 1 }
    END { exit bad }' "$TMP/gqa.straight.jsonl" "$TMP/gqa.second.jsonl" &&
    [ "$(wc -l <"$TMP/gqa.second.jsonl")" -eq 2 ]
}
check "GPT-2 GQA at TP 2 (fused q/k/v with replicated pieces) saves every element once" gqa_fused

# Saving an iteration that exists already (a job resumed from an older checkpoint into the same
# directory) replaces it in one step, nothing left over; the run is deterministic, so the new
# checkpoint holds the same weights (compared through their Hugging Face exports: a padded
# vocabulary row, which no load reads, keeps its initial value in the resumed job).
resave() {
  run 1 "${FLAGS[@]}" --train-iters 20 --exit-interval 10 --save-interval 5 --save "$TMP/resave" ||
    return 1
  cp -r "$TMP/resave/iter_0000010" "$TMP/original10" || return 1
  run 1 "${FLAGS[@]}" --train-iters 20 --exit-interval 10 --save-interval 5 --save "$TMP/resave" \
    --load "$TMP/resave/iter_0000005" || return 1
  "$BIN_DIR/tessera-convert" --from tessera "$TMP/original10" --to hf "$TMP/original10.hf" >/dev/null &&
    "$BIN_DIR/tessera-convert" --from tessera "$TMP/resave" --to hf "$TMP/resave.hf" >/dev/null &&
    cmp "$TMP/original10.hf/model.safetensors" "$TMP/resave.hf/model.safetensors" &&
    [ "$(ls "$TMP/resave" | tr '\n' ' ')" = "iter_0000005 iter_0000010 latest_checkpointed_iteration.txt " ]
}
check "re-saving an existing iteration replaces it atomically" resave

# --keep-checkpoints: saves at 2, 4, 6, 8 (and none extra at the end), the newest two kept.
keep() {
  run 1 "${FLAGS[@]}" --train-iters 8 --save "$TMP/keep" --save-interval 2 --keep-checkpoints 2 \
    || return 1
  [ "$(ls "$TMP/keep" | tr '\n' ' ')" = "iter_0000006 iter_0000008 latest_checkpointed_iteration.txt " ] &&
    [ "$(cat "$TMP/keep/latest_checkpointed_iteration.txt")" = 8 ]
}
check "--keep-checkpoints 2 keeps the newest two" keep

# Crash safety: rank 1 of 2 dies while the iteration-4 checkpoint is being saved.
crash() {
  run 2 "${FLAGS[@]}" --train-iters 6 --save "$TMP/crash" --save-interval 2 \
    --kill-during-save-at-iteration 4 && return 1  # the job must fail
  [ "$(cat "$TMP/crash/latest_checkpointed_iteration.txt")" = 2 ] || return 1
  [ ! -e "$TMP/crash/iter_0000004" ] || return 1
  run 2 "${FLAGS[@]}" --train-iters 6 --load "$TMP/crash" --save "$TMP/crash" \
    --metrics-file "$TMP/crash.jsonl" || return 1
  grep -q "(iteration 2, saved under" "$TMP/out" && [ "$(head -c 14 "$TMP/crash.jsonl")" = '{"iteration":3' ] &&
    [ "$(cat "$TMP/crash/latest_checkpointed_iteration.txt")" = 6 ] &&
    [ ! -e "$TMP/crash/iter_0000004.tmp" ]
}
check "a rank killed mid-save leaves the previous checkpoint loadable and latest on it" crash

# --finetune: the weights only; iterations, data and optimizer start afresh.
finetune() {
  run 1 "${FLAGS[@]}" --train-iters 3 --load "$TMP/fp32.ckpt" --finetune \
    --metrics-file "$TMP/ft.jsonl" || return 1
  grep -q "loaded weights from" "$TMP/out" && [ "$(head -c 14 "$TMP/ft.jsonl")" = '{"iteration":1' ] &&
    # Trained weights: the first loss is far below a fresh model's (about ln 257 = 5.55).
    awk -F'"lm_loss":' 'NR == 1 { split($2, a, ","); exit !(a[1] < 5.0) }' "$TMP/ft.jsonl"
}
check "--finetune loads the weights and starts at iteration 1" finetune
# --no-save-optim: the checkpoint holds the weights and no optimizer tensor (the full one, saved
# at the same iteration, has both), and it loads into a fresh run with --no-load-optim.
no_save_optim() {
  run 1 "${FLAGS[@]}" --train-iters 2 --save "$TMP/weights" --no-save-optim || return 1
  run 1 "${FLAGS[@]}" --train-iters 2 --save "$TMP/full" || return 1
  local lean="$TMP/weights/iter_0000002" full="$TMP/full/iter_0000002"
  grep -q '"transformer.h.0.attn.c_attn.weight@0"' "$lean/metadata.json" &&
    [ "$(grep -c '"optimizer\.' "$lean/metadata.json")" -eq 0 ] &&
    [ "$(grep -c '"optimizer\.' "$full/metadata.json")" -gt 0 ] &&
    [ "$(stat -c %s "$lean/rank_00000.safetensors")" -lt "$(stat -c %s "$full/rank_00000.safetensors")" ] &&
    run 1 "${FLAGS[@]}" --train-iters 3 --load "$TMP/weights" --no-load-optim &&
    grep -q "^> loaded weights, data position and seed from .* (iteration 2," "$TMP/out"
}
check "--no-save-optim saves weights only" no_save_optim
# The seed (dropout masks, data order) comes from the checkpoint: another --seed changes
# nothing unless --no-load-rng says so.
seed_from_checkpoint() {
  run 1 "${FLAGS[@]}" --train-iters 20 --load "$TMP/fp32.ckpt" --seed 7 \
    --metrics-file "$TMP/seed7.jsonl" || return 1
  diff <(numbers "$TMP/fp32.second.jsonl") <(numbers "$TMP/seed7.jsonl") >&2
}
check "another --seed is overridden by the checkpoint's" seed_from_checkpoint
no_load_rng() {
  run 1 "${FLAGS[@]}" --train-iters 20 --load "$TMP/fp32.ckpt" --seed 7 --no-load-rng \
    --metrics-file "$TMP/seed7.own.jsonl" || return 1
  grep -q "loaded weights, optimizer state, data position from" "$TMP/out" &&
    ! diff -q <(numbers "$TMP/fp32.second.jsonl") <(numbers "$TMP/seed7.own.jsonl") >/dev/null
}
check "--no-load-rng keeps --seed (other dropout masks and data order)" no_load_rng
FLAGS+=(--train-iters 12)
check "--no-load-optim loads weights and position" \
  run 1 "${FLAGS[@]}" --load "$TMP/weights" --no-load-optim
check "  (the log says so)" grep -q "loaded weights, data position and seed from" "$TMP/out"
check "--load of an empty directory starts from scratch" run 1 "${FLAGS[@]}" --load "$TMP/none"
check "  (the log says so)" grep -q "no checkpoint in --load" "$TMP/out"

# Damaged and incompatible checkpoints; each copy is damaged, the original stays loadable.
damaged() {  # damaged NAME: a fresh copy of the fp32 checkpoint at $TMP/NAME
  rm -rf "${TMP:?}/$1" && cp -r "$TMP/fp32.ckpt" "$TMP/$1"
}
RANK0="iter_0000010/rank_00000.safetensors"
damaged flipped
size=$(stat -c %s "$TMP/flipped/$RANK0")
printf '\x55' | dd of="$TMP/flipped/$RANK0" bs=1 seek=$((size - 1000)) conv=notrunc status=none
check "a flipped byte: checksum mismatch naming file and tensor" \
  expect_error 1 ".*rank_00000.safetensors: tensor .*: checksum mismatch" --load "$TMP/flipped"
check "  also at DP 2 (every rank exits)" \
  expect_error 2 ".*checksum mismatch" --load "$TMP/flipped"
damaged truncated
truncate -s 5000 "$TMP/truncated/$RANK0"
check "a truncated file" expect_error 1 ".*rank_00000.safetensors: 5000 bytes, but .* records" \
  --load "$TMP/truncated"
damaged missing
rm "$TMP/missing/$RANK0"
check "a missing file" expect_error 1 ".*rank_00000.safetensors: missing" --load "$TMP/missing"
damaged pointer
echo "ten" >"$TMP/pointer/latest_checkpointed_iteration.txt"
check "a malformed pointer" expect_error 1 ".*latest_checkpointed_iteration.txt: expected an iteration number" \
  --load "$TMP/pointer"
echo 30 >"$TMP/pointer/latest_checkpointed_iteration.txt"
check "a pointer to a missing iteration" expect_error 1 ".*names iteration 30 but" --load "$TMP/pointer"
damaged metadata
echo '{"format": "tessera-checkpoint", "version": 1' >"$TMP/metadata/iter_0000010/metadata.json"
check "malformed metadata.json" expect_error 1 ".*metadata.json: malformed checkpoint metadata" \
  --load "$TMP/metadata"
check "a different hidden size: the tensor and both shapes" \
  expect_error 1 ".*fp32.ckpt/iter_0000010: tensor transformer.wte.weight has shape \[257,64\] in the checkpoint but the model needs \[257,32\]" \
  --load "$TMP/fp32.ckpt" --hidden-size 32
check "weights-only checkpoint without --no-load-optim" \
  expect_error 1 ".*holds no optimizer state .*--no-load-optim or --finetune" --load "$TMP/weights"
check "SGD loading Adam state" expect_error 1 ".*holds adam optimizer state but this run uses --optimizer sgd" \
  --load "$TMP/fp32.ckpt" --optimizer sgd
check "--save-interval without --save" expect_error 1 "--save-interval needs --save" --save-interval 2
check "--finetune without --load" expect_error 1 "--finetune needs --load DIR" --finetune
check "the original still loads" run 1 "${FLAGS[@]}" --load "$TMP/fp32.ckpt"

echo "checkpoint: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
