#!/bin/bash
# Context parallelism on the command line (docs/context_parallel.md): a run reports its split;
# document masks and positions on real documents (tessera-preprocess, --reset-attention-mask,
# --reset-position-ids, --eod-mask-loss) give the single process's run at CP 4 for GPT-2 and
# LLaMA; Megatron-DeepSpeed's --ds-sequence-parallel-size is Ulysses; bad context-parallel input
# is one line and exit 2 on every rank. Usage: train_context_parallel.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: train_context_parallel.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$(dirname "$0")/lib.bash" train-cp-test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }

# Real documents of different lengths, an EOD after each: sequences of 64 tokens hold several.
for i in $(seq 1 200); do
  echo "{\"text\": \"document $i: $(printf 'w%d ' $(seq 1 $((i % 9 + 1))))end\"}"
done > "$TMP/docs.jsonl"
"$BIN_DIR/tessera-preprocess" --input "$TMP/docs.jsonl" --output-prefix "$TMP/docs" \
  --append-eod >/dev/null
DATA="$TMP/docs_text_document"
# close A B: two printed numbers agree to 1e-5 relative (and are numbers).
close() {
  [ -n "$1" ] && [ -n "$2" ] &&
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b + 0 != 0 && d <= 1e-5 * (b < 0 ? -b : b)) }'
}

FLAGS=(--model gpt2-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 1
       --global-batch-size 2 --eval-iters 0 --num-threads 1)
check "a CP 2 run trains (ring attention by default)" run 2 "${FLAGS[@]}" --context-parallel-size 2
check "  and reports its split" \
  grep -q "^> context parallel: 2 ranks, communication p2p, 32 of 64 tokens per sequence" "$TMP/out"
check "--ds-sequence-parallel-size 2 is CP 2 with a2a" \
  run 2 "${FLAGS[@]}" --ds-sequence-parallel-size 2
check "  (reported so)" grep -q "^> context parallel: 2 ranks, communication a2a" "$TMP/out"

# invariant MODEL TYPE: the document flags on real data at CP 4 reproduce the single process.
invariant() {
  bash "$ROOT/scripts/invariance.sh" --bin "$BIN_DIR" --np 4 \
    --layout "--context-parallel-size 4 --cp-comm-type $2" -- \
    --model "$1" --data-path "$DATA" --data-cache-path "$TMP/cache" --tokenizer-type ByteLevel \
    --eod-mask-loss --reset-position-ids --reset-attention-mask --attention-dropout 0.1 \
    --lr 1e-3 --adam-eps 1e-5 --train-iters 20 --micro-batch-size 2 --global-batch-size 4 \
    --eval-interval 10 --eval-iters 1 --log-interval 100 --num-threads 1 >"$TMP/out" 2>&1 ||
    { sed 's/^/    /' "$TMP/out" >&2; return 1; }
}
check "gpt2-tiny: CP 4 ring with document masks on real data = one process" invariant gpt2-tiny p2p
check "llama-tiny (GQA, RoPE): the same" invariant llama-tiny p2p
check "llama-tiny under all_gather" invariant llama-tiny all_gather
check "llama-tiny under a2a+p2p (2 x 2)" invariant llama-tiny \
  "a2a+p2p --hierarchical-context-parallel-sizes 2 2"
check "gpt2-tiny under a2a" invariant gpt2-tiny a2a

# MoE under CP: each rank adds its share of the balancing losses; the reported aux and z losses
# (metrics file) are the single process's.
moe_metric() {  # moe_metric KEY: KEY of iteration 1 in the last run's metrics file
  sed -n 's/.*"iteration":1,.*"'"$1"'":\([^,}]*\).*/\1/p' "$TMP/metrics.jsonl" | head -1
}
MOE=(--model mixtral-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 1
     --global-batch-size 2 --eval-iters 0 --num-threads 1 --moe-z-loss-coeff 0.001
     --metrics-file "$TMP/metrics.jsonl")
check "mixtral-tiny trains in one process" run 1 "${MOE[@]}"
aux1=$(moe_metric moe_aux_loss)
z1=$(moe_metric moe_z_loss)
rm -f "$TMP/metrics.jsonl"
check "and at CP 2" run 2 "${MOE[@]}" --context-parallel-size 2
check "  reporting the same aux loss ($aux1)" close "$aux1" "$(moe_metric moe_aux_loss)"
check "  and the same z loss ($z1)" close "$z1" "$(moe_metric moe_z_loss)"

# Bad input: one line, exit 2 on every rank.
check "sequence length not divisible by 2N" expect_error 4 \
  "--seq-length 60 is not divisible by 2 x --context-parallel-size = 8" \
  --context-parallel-size 4 --cp-comm-type a2a --seq-length 60
check "heads the all-to-all cannot split" expect_error 4 \
  "--cp-comm-type a2a: --num-attention-heads 6 / --tensor-model-parallel-size 1 = 6 heads per rank are not divisible by --context-parallel-size 4" \
  --context-parallel-size 4 --cp-comm-type a2a --num-attention-heads 6 --hidden-size 48
check "a per-layer list of the wrong length" expect_error 2 \
  "--cp-comm-type: 3 values; expected one, or one per layer (2)" \
  --context-parallel-size 2 --cp-comm-type a2a a2a a2a
check "hierarchical sizes whose product is not CP" expect_error 4 \
  "--hierarchical-context-parallel-sizes: expected two sizes (all-to-all, ring) whose product is --context-parallel-size 4" \
  --context-parallel-size 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 3
check "hierarchical sizes without a2a+p2p" expect_error 2 \
  "--hierarchical-context-parallel-sizes is for --cp-comm-type a2a+p2p" \
  --context-parallel-size 2 --cp-comm-type a2a --hierarchical-context-parallel-sizes 2 1
check "heads the hierarchical all-to-all cannot split" expect_error 4 \
  "--cp-comm-type a2a+p2p: --num-attention-heads 6 / --tensor-model-parallel-size 1 = 6 heads per rank are not divisible by --hierarchical-context-parallel-sizes\[0\] 4" \
  --context-parallel-size 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 1 \
  --num-attention-heads 6 --hidden-size 48
FLAGS=(--model llama-tiny "${FLAGS[@]:2}")
check "key/value groups the all-to-all cannot split" expect_error 4 \
  "--cp-comm-type a2a: 3 key/value groups per tensor-parallel rank (--num-query-groups 3) neither split over nor divide --context-parallel-size 4" \
  --num-attention-heads 12 --num-query-groups 3 --hidden-size 96 \
  --context-parallel-size 4 --cp-comm-type a2a
check "CP with an MoE capacity" expect_error 2 \
  "--context-parallel-size 2 with --moe-expert-capacity-factor: the capacity ranks tokens across the whole micro-batch" \
  --num-experts 4 --moe-expert-capacity-factor 1.0 --context-parallel-size 2
check "tokens per rank that SP cannot split" expect_error 8 \
  "--seq-length 12 / --context-parallel-size 2 = 6 tokens per rank do not split over --tensor-model-parallel-size 4 with --sequence-parallel" \
  --context-parallel-size 2 --cp-comm-type a2a --tensor-model-parallel-size 4 --sequence-parallel \
  --seq-length 12
check "--ds-sequence-parallel-size against --context-parallel-size" expect_error 2 \
  "--ds-sequence-parallel-size 2 and --context-parallel-size 1 disagree" \
  --ds-sequence-parallel-size 2 --context-parallel-size 1

echo "train_context_parallel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
