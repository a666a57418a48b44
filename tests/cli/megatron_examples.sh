#!/bin/bash
# Megatron-LM's own example scripts run under tessera-train: the argument lists of
# examples/gpt3/train_gpt3_175b_distributed.sh, examples/llama/train_llama3_8b_h100_fp8.sh and
# examples/mixtral/train_mixtral_8x7b_distributed.sh (tests/data/megatron_examples/), with flags
# appended that shrink the model and the run to test size (the last occurrence of a flag wins,
# as with argparse) and the scripts' parallel sizes reduced to fit, train 3 iterations under
# mpirun; every flag of the scripts is implemented or logged as having no effect here.
# Usage: megatron_examples.sh BUILD_BIN_DIR
BIN_DIR="$(cd "${1:?usage: megatron_examples.sh BUILD_BIN_DIR}" && pwd)"
BIN="$BIN_DIR/tessera-train"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
EXAMPLES="$ROOT/tests/data/megatron_examples"
source "$(dirname "$0")/lib.bash" megatron-examples
FLAGS=()
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$TMP" || exit 1

# args_of FILE: the fixture's words, its ${NAME}s replaced by the variables of that name.
args_of() {
  local line name
  ARGS=()
  while read -r line; do
    [[ -z "$line" || "$line" == \#* ]] && continue
    for name in DATA_PATH VOCAB_FILE MERGE_FILE CHECKPOINT_PATH TENSORBOARD_LOGS_PATH \
                DATA_CACHE_PATH TOKENIZER_MODEL WANDB_PROJECT WANDB_NAME; do
      line="${line//\$\{$name\}/${!name-}}"
    done
    read -r -a words <<<"$line"
    ARGS+=("${words[@]}")
  done <"$1"
}
# run_shown NP ARGS...: run, with its stderr shown when it fails.
run_shown() { run "$@" || { sed 's/^/    /' "$TMP/err" | grep -m3 error >&2; return 1; }; }
# noted FLAG: the run logged FLAG as having no effect.
noted() { grep -q "^note: $1 has no effect on this backend" "$TMP/out"; }
iterations() { [ "$(grep -c '^ iteration ' "$TMP/out")" -eq "$1" ]; }
SHRINK=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128
        --seq-length 64 --max-position-embeddings 64 --num-threads 1 --log-interval 1
        --eval-iters 1)

# --- GPT-3 175B: GPT-2 BPE data, fp16, batch rampup, TP 8 x PP 16 reduced to TP 2 x PP 2 ------
GPT2="$(bash "$ROOT/scripts/fetch_gpt2_vocab.sh")" || { echo "FAIL: no GPT-2 vocabulary" >&2; exit 1; }
for i in $(seq 1 400); do
  echo "{\"text\": \"Document $i tells of $((i * 7 % 13)) apples and $((i % 5)) pears in the market.\"}"
done >"$TMP/corpus.jsonl"
"$BIN_DIR/tessera-preprocess" --input "$TMP/corpus.jsonl" --output-prefix "$TMP/corpus" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" \
  --merge-file "$GPT2/vocab.bpe" --append-eod >/dev/null 2>&1
DATA_PATH="$TMP/corpus_text_document" VOCAB_FILE="$GPT2/encoder.json" \
  MERGE_FILE="$GPT2/vocab.bpe" CHECKPOINT_PATH="$TMP/gpt3-ckpt" \
  TENSORBOARD_LOGS_PATH="$TMP/gpt3-tb"
args_of "$EXAMPLES/gpt3_175b.args"
check "GPT-3 175B script: 3 iterations at TP 2 x PP 2 (exit 0)" \
  run_shown 4 "${ARGS[@]}" "${SHRINK[@]}" --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --global-batch-size 8 --rampup-batch-size 4 2 8 \
  --train-iters 3 --lr-decay-iters 3
check "  3 iterations" iterations 3
check "  the batch ramps up 4, 6, 8 (samples 4, 10, 18)" \
  grep -q "iteration        3/       3 | consumed samples:           18 |.*global batch size:     8" \
  "$TMP/out"
check "  --attention-backend noted" noted --attention-backend
check "  a checkpoint in --save" [ -f "$TMP/gpt3-ckpt/latest_checkpointed_iteration.txt" ]
check "  TensorBoard events" test -n "$(compgen -G "$TMP/gpt3-tb/*tfevents*")"

GPT3_RUN=("${ARGS[@]}" "${SHRINK[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
          --global-batch-size 8 --rampup-batch-size 4 2 8 --lr-decay-iters 3)
check "--load without a checkpoint and --exit-on-missing-checkpoint: one line, exit 2" \
  expect_error 4 "--load $TMP/none holds no checkpoint" "${GPT3_RUN[@]}" --train-iters 1 \
  --load "$TMP/none" --save "$TMP/none" --exit-on-missing-checkpoint
check "--pretrained-checkpoint: with nothing in --load, finetunes from it (exit 0)" \
  run_shown 4 "${GPT3_RUN[@]}" --train-iters 1 --load "$TMP/none" --save "$TMP/none" \
  --pretrained-checkpoint "$TMP/gpt3-ckpt"
check "  from iteration 1, weights of the pretrained run" \
  grep -q "finetuning from --pretrained-checkpoint $TMP/gpt3-ckpt" "$TMP/out"

# --- Llama 3 8B: mock data, NullTokenizer, sample-based schedule, decoupled lr, profile ------
CHECKPOINT_PATH="$TMP/llama-ckpt" TENSORBOARD_LOGS_PATH="$TMP/llama-tb" \
  DATA_CACHE_PATH="$TMP/llama-cache"
args_of "$EXAMPLES/llama3_8b.args"
check "Llama 3 8B script: 3 iterations at DP 2 (exit 0)" \
  run_shown 2 "${ARGS[@]}" "${SHRINK[@]}" --num-query-groups 2 --kv-channels 16 --vocab-size 1024 \
  --global-batch-size 8 --train-samples 24 --lr-decay-samples 24 --lr-warmup-samples 8 \
  --profile-step-start 1 --profile-step-end 2
check "  3 iterations" iterations 3
check "  warmup in samples: the peak lr at 8 samples (iteration 2)" \
  grep -q "iteration        2/       3 |.*learning rate: 1.500000E-04" "$TMP/out"
check "  the profile window's timeline (profile.json)" grep -q traceEvents "$TMP/profile.json"
check "  --grad-reduce-in-bf16: the gradients reduced in bf16" \
  grep -q "overlap on, reduced in bf16" "$TMP/out"
for flag in --use-mcore-models --fp8-format --manual-gc \
            --overlap-param-gather --ckpt-format --num-workers; do
  check "  $flag noted" noted "$flag"
done

# --- Mixtral 8x7B: Llama2Tokenizer (SentencePiece), MoE, EP 2 -----------------------------------
for i in $(seq 1 200); do echo "the market sells $i apples and $((i * 3)) pears today"; done \
  >"$TMP/spm.txt"
spm_train --input="$TMP/spm.txt" --model_prefix="$TMP/spm" --vocab_size=300 --model_type=bpe \
  >/dev/null 2>&1
TOKENIZER_MODEL="$TMP/spm.model" WANDB_PROJECT=Mixtral WANDB_NAME=Mixtral_8x7B
args_of "$EXAMPLES/mixtral_8x7b.args"
check "Mixtral 8x7B script: 3 iterations at EP 2 (exit 0)" \
  run_shown 2 "${ARGS[@]}" "${SHRINK[@]}" --num-query-groups 2 --train-iters 3
check "  3 iterations" iterations 3
check "  --no-masked-softmax-fusion and --wandb-project noted" \
  eval 'noted --no-masked-softmax-fusion && noted --wandb-project'
check "  --no-load-optim without --load noted" \
  grep -q "^note: --no-load-optim and --no-load-rng have no effect without --load" "$TMP/out"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
