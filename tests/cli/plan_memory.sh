#!/bin/bash
# tessera-plan --evaluate predicts the memory accountant's peak of a rank (plan/memory_prediction.h)
# before anything runs; this holds the prediction against what tessera-train then measures: rank
# 0's `peak_mem_bytes` (its metrics file) and the peak of the rank its memory report names (the
# largest measured total; the report's "peak of all categories at once"), over layouts of GPT- and
# LLaMA-style models: DP with ZeRO 0-3, TP with and without SP, PP (GPipe, 1F1B, interleaved),
# their products, full (uniform, block) and selective recomputation, micro-batch sizes, context
# parallelism, MoE with expert parallelism, optimizer state and parameters on NVMe, gradients
# and TP activations reduced in bf16. With a machine description this host's --calibrate wrote
# (its resident baseline a rank, for 1, 2, 4 and 8 ranks), the plan also predicts the process's
# peak resident set, held against the memory report's for the same rank. Memory is
# deterministic, so the test asks what the plan promises of both: median error <= 3%, largest
# <= 8%. Also: bad input is one line and exit code 2.
# Usage: plan_memory.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: plan_memory.sh BUILD_BIN_DIR}"
source "$(dirname "$0")/lib.bash" plan_memory
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
COMMON=(--mock-data --lr 1e-3 --train-iters 2 --global-batch-size 8 --num-threads 1
        --eval-interval 0)
GPT=(--model gpt2-tiny --hidden-size 256 --num-attention-heads 4 --num-layers 4)
LLAMA=(--model llama-tiny --hidden-size 256 --num-attention-heads 4 --num-query-groups 2
       --num-layers 4)
MOE=(--model mixtral-tiny --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 384
     --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)
: >"$TMP/errors"
: >"$TMP/rss_errors"

# This host's description, as a user makes it: one quick calibration for each rank count the
# layouts use (the resident baseline is measured after the kernels; the NVMe layouts' step time
# needs storage rates, though only memory is compared here).
mkdir -p "$TMP/nvme"
for np in 1 2 4 8; do
  if ! timeout 120 mpirun --oversubscribe -np "$np" "$BIN_DIR/tessera-plan" --calibrate --quick \
      --machine "$TMP/machine.json" --num-threads 1 --nvme-path "$TMP/nvme" >/dev/null \
      2>"$TMP/err"; then
    echo "FAIL: calibrating $np ranks: $(tail -3 "$TMP/err")" >&2
    failed=$((failed + 1))
  fi
done

# layout NAME NP FLAGS...: the plan's rank-0 peak against the run's measured one.
layout() {
  local name="$1" np="$2"
  shift 2
  local flags=("${COMMON[@]}" "$@")
  if ! "$BIN_DIR/tessera-plan" --evaluate --world-size "$np" --json --machine "$TMP/machine.json" \
      "${flags[@]}" >"$TMP/plan.json" 2>"$TMP/err"; then
    echo "FAIL: $name: tessera-plan failed: $(cat "$TMP/err")" >&2
    failed=$((failed + 1))
    return
  fi
  rm -f "$TMP/metrics.jsonl"
  if ! timeout 120 mpirun --oversubscribe -np "$np" "$BIN_DIR/tessera-train" "${flags[@]}" \
      --metrics-file "$TMP/metrics.jsonl" >"$TMP/out" 2>"$TMP/err"; then
    echo "FAIL: $name: tessera-train failed: $(tail -3 "$TMP/err")" >&2
    failed=$((failed + 1))
    return
  fi
  /usr/bin/python3 - "$TMP/plan.json" "$TMP/metrics.jsonl" "$TMP/out" "$name" "$TMP/rss_errors" \
      >>"$TMP/errors" <<'PY' || { echo "FAIL: $name: no comparison" >&2; failed=$((failed + 1)); }
import json, re, sys
plan = json.load(open(sys.argv[1]))
name = sys.argv[4]
def row(rank, predicted, measured):
    print(f"{(predicted - measured) / measured:+.5f}\t{predicted / 2**20:.3f}\t"
          f"{measured / 2**20:.3f}\t{name}, rank {rank}")
row(0, plan["ranks"][0]["peak_bytes"],
    [json.loads(line)["peak_mem_bytes"] for line in open(sys.argv[2])][-1])
report = open(sys.argv[3]).read()
r = int(re.search(r"memory report, rank (\d+) of", report).group(1))
peak = float(re.search(r"peak of all categories at once \(the accountant's, peak mem\): +(\S+)",
                       report).group(1))
if r != 0:
    row(r, plan["ranks"][r]["peak_bytes"], peak * 2**20)
rss = float(re.search(r"peak resident set of the process: +(\S+)", report).group(1)) * 2**20
with open(sys.argv[5], "a") as rss_errors:
    predicted = plan["ranks"][r]["resident_bytes"]
    rss_errors.write(f"{(predicted - rss) / rss:+.5f}\t{predicted / 2**20:.3f}\t"
                     f"{rss / 2**20:.3f}\t{name}, rank {r}\n")
# The plan's categories are the report's theory column for that rank (one source of truth; the
# plan derives the rank's layout from the flags, the trainer from its live objects).
keys = {"parameters": "parameters", "gradients": "gradients", "optimizer state": "optimizer",
        "activations": "activations", "communication buffers": "communication_buffers",
        "other": "other"}
for label, key in keys.items():
    theory = re.search(r"^>   %s +(\S+) \|" % re.escape(label), report, re.M).group(1)
    planned = plan["ranks"][r]["memory_bytes"][key] / 2**20
    if theory != "-" and abs(float(theory) - planned) > 0.0015:
        sys.exit(f"{label}: report's theory {theory} MiB, plan {planned:.4f} MiB")
PY
}

for stage in 0 1 2 3; do
  layout "gpt DP 2, ZeRO $stage" 2 "${GPT[@]}" --micro-batch-size 2 --zero-stage "$stage"
done
layout "gpt one rank, fp32, micro-batch 1" 1 "${GPT[@]}" --micro-batch-size 1
layout "gpt one rank, bf16, micro-batch 4" 1 "${GPT[@]}" --micro-batch-size 4 --bf16
layout "gpt DP 2, ZeRO 1, bf16" 2 "${GPT[@]}" --micro-batch-size 2 --zero-stage 1 --bf16
layout "gpt TP 2" 2 "${GPT[@]}" --micro-batch-size 2 --tensor-model-parallel-size 2
layout "gpt TP 2 + SP, bf16" 2 "${GPT[@]}" --micro-batch-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel --bf16
layout "gpt TP 2 + SP x DP 2, ZeRO 1" 4 "${GPT[@]}" --micro-batch-size 1 \
  --tensor-model-parallel-size 2 --sequence-parallel --zero-stage 1
layout "gpt PP 2, GPipe" 2 "${GPT[@]}" --micro-batch-size 1 --pipeline-model-parallel-size 2 \
  --pipeline-schedule gpipe
layout "gpt PP 2, 1F1B" 2 "${GPT[@]}" --micro-batch-size 1 --pipeline-model-parallel-size 2
layout "gpt PP 2, interleaved (V 2)" 2 "${GPT[@]}" --micro-batch-size 1 \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
# The last stage holds more (the report names rank 1): uneven stages, an untied output layer.
layout "gpt PP 2, GPipe, first stage 1 layer" 2 "${GPT[@]}" --micro-batch-size 1 \
  --pipeline-model-parallel-size 2 --pipeline-schedule gpipe --decoder-first-pipeline-num-layers 1
layout "gpt PP 2, 1F1B, first stage 1 layer, untied output layer of 8192" 2 "${GPT[@]}" \
  --micro-batch-size 1 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 \
  --untie-embeddings-and-output-weights --vocab-size 8192
layout "gpt TP 2 x PP 2, bf16" 4 "${GPT[@]}" --micro-batch-size 1 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --bf16
layout "gpt PP 2 x DP 2, ZeRO 3" 4 "${GPT[@]}" --micro-batch-size 1 \
  --pipeline-model-parallel-size 2 --zero-stage 3
layout "gpt full recomputation, uniform 1" 1 "${GPT[@]}" --micro-batch-size 2 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
layout "gpt full recomputation, block 2, bf16" 1 "${GPT[@]}" --micro-batch-size 2 --bf16 \
  --recompute-granularity full --recompute-method block --recompute-num-layers 2
layout "gpt selective recomputation" 1 "${GPT[@]}" --micro-batch-size 2 \
  --recompute-granularity selective
layout "llama one rank, bf16" 1 "${LLAMA[@]}" --micro-batch-size 2 --bf16
layout "llama DP 2, ZeRO 2, bf16" 2 "${LLAMA[@]}" --micro-batch-size 2 --zero-stage 2 --bf16
layout "llama TP 2 + SP" 2 "${LLAMA[@]}" --micro-batch-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel
layout "llama PP 2, 1F1B, recompute uniform 1" 2 "${LLAMA[@]}" --micro-batch-size 1 \
  --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform \
  --recompute-num-layers 1
layout "llama CP 2 (p2p)" 2 "${LLAMA[@]}" --micro-batch-size 2 --context-parallel-size 2
layout "gpt CP 2 (a2a)" 2 "${GPT[@]}" --micro-batch-size 2 --context-parallel-size 2 \
  --cp-comm-type a2a
# Where the peak's parts overlap: ZeRO 3's gathers with a large tied embedding, buckets smaller
# than the model, ZeRO 2 under a deeper pipeline, ZeRO 3 with recomputation.
layout "gpt DP 2, ZeRO 3, tied vocabulary of 65536" 2 "${GPT[@]}" --micro-batch-size 1 \
  --zero-stage 3 --vocab-size 65536
layout "gpt DP 2, ZeRO 2, buckets of 300000" 2 "${GPT[@]}" --micro-batch-size 2 --zero-stage 2 \
  --ddp-bucket-size 300000
layout "gpt PP 2 x DP 2, ZeRO 1, buckets of 300000" 4 "${GPT[@]}" --micro-batch-size 1 \
  --pipeline-model-parallel-size 2 --zero-stage 1 --ddp-bucket-size 300000
layout "gpt PP 4 x DP 2, ZeRO 2, untied vocabulary of 32768" 8 "${GPT[@]}" \
  --micro-batch-size 1 --pipeline-model-parallel-size 4 --zero-stage 2 \
  --untie-embeddings-and-output-weights --vocab-size 32768
layout "gpt DP 2, ZeRO 3, full recomputation, uniform 2" 2 "${GPT[@]}" --micro-batch-size 2 \
  --zero-stage 3 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
# Gradients reduced in bf16 (--grad-reduce-in-bf16): the 16-bit pieces each reduction goes
# through, with buckets small enough that they run while backward keeps activations.
layout "gpt DP 2, ZeRO 0, buckets of 300000, reduced in bf16" 2 "${GPT[@]}" --micro-batch-size 2 \
  --zero-stage 0 --ddp-bucket-size 300000 --grad-reduce-in-bf16
layout "llama DP 2, ZeRO 3, bf16, reduced in bf16" 2 "${LLAMA[@]}" --micro-batch-size 2 \
  --zero-stage 3 --bf16 --grad-reduce-in-bf16
# TP sums of 16-bit activations in their own type (--tp-reduce-in-16-bit): no fp32 copies.
layout "gpt TP 2 + SP, bf16, TP sums in bf16" 2 "${GPT[@]}" --micro-batch-size 2 \
  --tensor-model-parallel-size 2 --sequence-parallel --bf16 --tp-reduce-in-16-bit
layout "llama TP 2 + SP x DP 2, ZeRO 1, bf16, all sums in bf16" 4 "${LLAMA[@]}" \
  --micro-batch-size 2 --tensor-model-parallel-size 2 --sequence-parallel --bf16 \
  --tp-reduce-in-16-bit --zero-stage 1 --grad-reduce-in-bf16
layout "moe TP 2, bf16, TP sums in bf16" 2 "${MOE[@]}" --micro-batch-size 2 \
  --tensor-model-parallel-size 2 --bf16 --tp-reduce-in-16-bit
# stage3_max_live_parameters below what prefetching would gather: backward's gathers ahead stop
# at the limit (the plan without it predicted 53.2 MiB where 48.0 was measured).
layout "gpt DP 2, ZeRO 3, at most 1000000 parameters live" 2 "${GPT[@]}" --micro-batch-size 2 \
  --zero-stage 3 --stage3-max-live-parameters 1000000
layout "gpt DP 2, ZeRO 3, full recomputation, uniform 2, at most 1000000 parameters live" 2 \
  "${GPT[@]}" --micro-batch-size 2 --zero-stage 3 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 2 --stage3-max-live-parameters 1000000
# Optimizer state on NVMe: in memory are its buffers (sub-groups of 20000 elements, fewer than a
# rank owns; and DeepSpeed's default 1e9, more: one sub-group of the whole owned state).
mkdir -p "$TMP/nvme"
layout "gpt DP 2, ZeRO 1, optimizer state on NVMe, sub-groups of 20000" 2 "${GPT[@]}" \
  --micro-batch-size 2 --zero-stage 1 --offload-optimizer-nvme-path "$TMP/nvme" \
  --offload-sub-group-size 20000
layout "llama one rank, bf16, ZeRO 2, optimizer state on NVMe, 3 buffers" 1 "${LLAMA[@]}" \
  --micro-batch-size 2 --bf16 --zero-stage 2 --offload-optimizer-nvme-path "$TMP/nvme" \
  --offload-buffer-count 3
# Parameters on NVMe too (ZeRO 3): the parts max_in_cpu keeps, the swap buffers.
layout "gpt DP 2, ZeRO 3, parameters and optimizer state on NVMe" 2 "${GPT[@]}" \
  --micro-batch-size 2 --zero-stage 3 --offload-param-nvme-path "$TMP/nvme" \
  --offload-param-max-in-cpu 0 --offload-optimizer-nvme-path "$TMP/nvme"
layout "llama TP 2 x DP 2, ZeRO 3, bf16, parameters on NVMe, max_in_cpu 300000" 4 "${LLAMA[@]}" \
  --micro-batch-size 1 --bf16 --zero-stage 3 --tensor-model-parallel-size 2 \
  --offload-param-nvme-path "$TMP/nvme" --offload-param-max-in-cpu 300000
layout "moe one rank, padded" 1 "${MOE[@]}" --micro-batch-size 2
layout "moe EP 2, ZeRO 1, padded" 2 "${MOE[@]}" --micro-batch-size 2 \
  --expert-model-parallel-size 2 --zero-stage 1

echo "plan vs measured accountant peak (error, predicted MiB, measured MiB, layout and rank):"
sed 's/^/  /' "$TMP/errors"
echo "plan vs measured peak resident set (error, predicted MiB, measured MiB, layout and rank):"
sed 's/^/  /' "$TMP/rss_errors"
check "at least 20 layouts measured" test "$(grep -c ', rank 0$' "$TMP/errors")" -ge 20
check "at least 20 resident sets measured" test "$(wc -l <"$TMP/rss_errors")" -ge 20
summary() {  # summary FILE
  /usr/bin/python3 - "$1" <<'PY'
import statistics, sys
errors = [abs(float(line.split("\t")[0])) for line in open(sys.argv[1])]
median, largest = statistics.median(errors), max(errors)
print(f"  {len(errors)} comparisons: median |error| {100 * median:.2f}%, largest {100 * largest:.2f}%")
sys.exit(0 if median <= 0.03 and largest <= 0.08 else 1)
PY
}
check "accountant's peak: median |error| <= 3% and largest <= 8%" summary "$TMP/errors"
check "resident set: median |error| <= 3% and largest <= 8%" summary "$TMP/rss_errors"

# Bad input: one line naming what is wrong, exit code 2.
bad() {  # bad PATTERN ARGS...
  local pattern="$1"
  shift
  "$BIN_DIR/tessera-plan" "$@" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  [ $code -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$pattern" "$TMP/err" || {
    echo "  exit $code; stderr: $(cat "$TMP/err")" >&2
    return 1
  }
}
check "no --world-size" bad "give --world-size N" --evaluate "${COMMON[@]}" "${GPT[@]}"
check "--world-size 0" bad "world-size '0'" --evaluate --world-size 0 "${COMMON[@]}" "${GPT[@]}"
check "sizes that do not divide the world" bad "tensor" --evaluate --world-size 3 \
  "${COMMON[@]}" "${GPT[@]}" --tensor-model-parallel-size 2
check "an unknown flag" bad "unknown-flag" --evaluate --world-size 1 "${COMMON[@]}" --unknown-flag
check "a schedule the layout cannot run" bad "multiple of --pipeline-model-parallel-size" \
  --evaluate --world-size 2 "${COMMON[@]}" "${GPT[@]}" --micro-batch-size 1 \
  --global-batch-size 3 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
check "a live limit below a unit (the trainer's words)" bad \
  "stage3-max-live-parameters 300000 is below what one step needs live: 512 persistent + 789760" \
  --evaluate --world-size 2 "${COMMON[@]}" "${GPT[@]}" --micro-batch-size 2 --zero-stage 3 \
  --stage3-max-live-parameters 300000
check "a search without a machine" bad "the search needs --machine FILE" --world-size 2 \
  "${COMMON[@]}" "${GPT[@]}"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
