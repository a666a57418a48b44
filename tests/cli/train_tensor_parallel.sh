#!/bin/bash
# tessera-train with --tensor-model-parallel-size: a model that cannot be split gets one error
# line naming the flag and sizes and exit code 2 on every rank (no hang); --sequence-parallel at
# TP 1 is turned off with a warning; a TP run prints its progress once (rank 0).
# Usage: train_tensor_parallel.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: train_tensor_parallel.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" train-tp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--mock-data --train-iters 2 --lr 1e-3 --eval-iters 0 --num-threads 1)

check "heads not divisible by TP" expect_error 3 \
  "--num-attention-heads: 4 is not divisible by --tensor-model-parallel-size 3" \
  --model gpt2-tiny --tensor-model-parallel-size 3
check "query groups neither divisible by TP nor dividing it" expect_error 2 \
  "--num-query-groups: 3 is neither divisible by --tensor-model-parallel-size 2" \
  --model llama-tiny --hidden-size 96 --num-attention-heads 6 --num-query-groups 3 \
  --tensor-model-parallel-size 2
check "ffn size not divisible by TP" expect_error 4 \
  "--ffn-hidden-size: 170 is not divisible by --tensor-model-parallel-size 4" \
  --model llama-tiny --ffn-hidden-size 170 --tensor-model-parallel-size 4
check "sequence not divisible by TP under SP" expect_error 2 \
  "--sequence-parallel: --seq-length 63 is not divisible by --tensor-model-parallel-size 2" \
  --model gpt2-tiny --seq-length 63 --tensor-model-parallel-size 2 --sequence-parallel

sp_at_tp1() {
  run 1 "${FLAGS[@]}" --model gpt2-tiny --sequence-parallel || return 1
  [ "$(grep -c '^warning: --sequence-parallel has no effect with --tensor-model-parallel-size 1' "$TMP/err")" -eq 1 ]
}
check "--sequence-parallel at TP 1 warns and trains" sp_at_tp1

printed_once() {
  run 2 "${FLAGS[@]}" --model gpt2-tiny --tensor-model-parallel-size 2 --log-interval 1 || return 1
  [ "$(grep -c '^ iteration        2/       2' "$TMP/out")" -eq 1 ] &&
    [ "$(grep -c '^> tensor parallel: 2 ranks' "$TMP/out")" -eq 1 ]
}
check "a TP run reports once" printed_once

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
