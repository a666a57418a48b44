#!/bin/bash
# The memory report of the first iteration (train/memory_report.h): for DP 2 under ZeRO 0-3, PP 2
# (1F1B and interleaved), TP 2 with and without sequence parallelism, TP 2 x PP 2, full (uniform
# and block) and selective recomputation, context parallelism (p2p, all_gather, a2a, a2a+p2p,
# CP x TP + SP; a LLaMA-style model with and without CP) and MoE layers (one rank, expert parallelism with both dispatchers, TP, experts
# whole under TP + SP, a shared expert, recomputation, PP), the theoretical parameters, gradients and optimizer state (the layout's arithmetic from the
# configuration) agree with the measured ones (resident bytes of the flat buffers, the memory
# accountant) within 5%, and so do the activations' and the communication buffers' (the
# accountant's peaks; nothing beyond a few hundred bytes where none are expected). The MoE runs
# whose activations are checked pad every expert to its capacity, so their rows are the theory's;
# dropless ones are checked for the model states (their rows follow the router). Under ZeRO 2-3
# with overlapped reduction the theory of the buffers is a bound (buckets reduced early give
# their buffer back, at a time that depends on timing): checked as one, and exactly with
# --no-overlap-grad-reduce; so is it where ZeRO 0's word-embedding rows are the largest buffer
# (as many as the distinct tokens). The kernels' scratch ("other") is checked wherever the activations are
# (against the plan for the CPU target and GEMM path the run takes). The report lists every
# category and the peak resident set.
# Usage: memory_report.sh BUILD_BIN_DIR
BIN="${1:?usage: memory_report.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" memory_report
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Layers of 0.8M elements: above ZeRO 3's persistence threshold (1e5), so they are sharded.
FLAGS=(--mock-data --lr 1e-3 --train-iters 1 --micro-batch-size 1 --global-batch-size 4
       --num-threads 1 --eval-interval 0 --bf16)
GPT=(--model gpt2-tiny --hidden-size 256 --num-attention-heads 4 --num-layers 4)
MOE=(--model mixtral-tiny --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 384)
PADDED=(--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)

# within_5_percent WHAT: the report in $TMP/out has every category, and the model states (and
# with WHAT=activations the activations and buffers, with WHAT=bound the buffers as a bound, with
# WHAT=bound_dense the activations and the buffers as a bound) within 5%.
within_5_percent() {
  /usr/bin/python3 - "$TMP/out" "${1:-}" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
checked = ["parameters", "gradients", "optimizer state"] + (
    ["activations", "communication buffers", "other"] if sys.argv[2] == "activations" else
    ["activations", "other"] if sys.argv[2] == "bound_dense" else [])
ok = "memory report, rank" in text and "peak resident set of the process" in text
for name in ["parameters", "gradients", "optimizer state", "activations",
             "communication buffers", "other"]:
    m = re.search(r"^>   %s +(\S+) \| +(\S+) \|" % re.escape(name), text, re.M)
    if not m:
        print(f"  no line for {name}", file=sys.stderr); ok = False; continue
    bound = sys.argv[2] in ("bound", "bound_dense") and name == "communication buffers"
    if name in checked or bound:
        theory, measured = float(m.group(1)), float(m.group(2))
        # Nothing expected (no ZeRO, no TP): at most the scalars' few hundred bytes.
        if theory == 0 and name == "communication buffers":
            good = measured <= 0.001
        elif bound:
            good = theory > 0 and 0 < measured <= 1.05 * theory
        else:
            good = theory > 0 and abs(measured - theory) <= 0.05 * theory
        if not good:
            print(f"  {name}: theory {theory} MiB, measured {measured} MiB", file=sys.stderr)
            ok = False
sys.exit(0 if ok else 1)
PY
}

layout() {  # layout NAME NP FLAGS...: one run, its report checked (activations too, unless a
            # dropless MoE run: then the buffers as a bound; WHAT=bound_dense: the buffers as a
            # bound, the activations exactly)
  local name="$1" np="$2" what="${WHAT:-activations}"
  shift 2
  [[ " $* " == *" mixtral-tiny "* && " $* " != *" --moe-pad-expert-input-to-capacity "* ]] &&
    what=bound
  run "$np" "${FLAGS[@]}" "$@"
  check "$name: exit 0, model states and ${what/bound/buffers (a bound)} within 5% of the theory" \
    within_5_percent $what
}

# ZeRO 0 reduces the word embedding's rows after backward (distributed/data_parallel_grads.h):
# as many as the distinct tokens of the ranks' micro-batches, which the theory bounds by their
# count (mock data repeats tokens), so where those rows are the largest buffer it is a bound.
WHAT=bound_dense layout "DP 2, ZeRO 0" 2 "${GPT[@]}" --zero-stage 0
layout "DP 2, ZeRO 1" 2 "${GPT[@]}" --zero-stage 1
# ZeRO 2-3 reduce each bucket as backward reaches it and give a bucket's buffer back once its
# reduce-scatter is done: when that happens depends on timing, so the peak is checked exactly with
# the reduction at the end of backward and as a bound with it overlapped (the default).
for stage in 2 3; do
  layout "DP 2, ZeRO $stage, reduction after backward" 2 "${GPT[@]}" --zero-stage "$stage" \
    --no-overlap-grad-reduce
  run 2 "${FLAGS[@]}" "${GPT[@]}" --zero-stage "$stage"
  check "DP 2, ZeRO $stage, overlapped reduction: model states and activations within 5%, buffers within their bound" \
    within_5_percent bound_dense
done
layout "PP 2, GPipe" 2 "${GPT[@]}" --pipeline-model-parallel-size 2 --pipeline-schedule gpipe
layout "PP 2, 1F1B" 2 "${GPT[@]}" --pipeline-model-parallel-size 2
layout "PP 2, interleaved (V 2)" 2 "${GPT[@]}" --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
layout "TP 2" 2 "${GPT[@]}" --tensor-model-parallel-size 2
layout "TP 2 + SP" 2 "${GPT[@]}" --tensor-model-parallel-size 2 --sequence-parallel
layout "TP 2 + SP x DP 2, ZeRO 1" 4 "${GPT[@]}" --tensor-model-parallel-size 2 \
  --sequence-parallel --zero-stage 1
layout "TP 2 + SP x PP 2" 4 "${GPT[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2
layout "full recomputation, uniform 1" 1 "${GPT[@]}" --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1
layout "full recomputation, uniform 2" 1 "${GPT[@]}" --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 2
layout "full recomputation, block 2" 1 "${GPT[@]}" --recompute-granularity full \
  --recompute-method block --recompute-num-layers 2
layout "selective recomputation" 1 "${GPT[@]}" --recompute-granularity selective
layout "PP 2 x DP 2, ZeRO 3 (the split tied embedding's units)" 4 "${GPT[@]}" \
  --pipeline-model-parallel-size 2 --zero-stage 3
layout "MoE EP 2, ZeRO 3" 2 "${MOE[@]}" --expert-model-parallel-size 2 --zero-stage 3
layout "MoE EP 1 x DP 2, ZeRO 3 (experts inside the layer's unit)" 2 "${MOE[@]}" --zero-stage 3
for type in p2p all_gather a2a; do
  layout "CP 2 ($type)" 2 "${GPT[@]}" --context-parallel-size 2 --cp-comm-type "$type"
done
layout "CP 4 (a2a+p2p, groups of 2)" 4 "${GPT[@]}" --context-parallel-size 4 \
  --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2
layout "CP 2 x TP 2 + SP" 4 "${GPT[@]}" --context-parallel-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel
LLAMA=(--model llama-tiny --hidden-size 256 --num-attention-heads 4 --num-query-groups 2
       --num-layers 4)
layout "LLaMA-style (narrow MLP: the attention's backward is the larger)" 1 "${LLAMA[@]}"
layout "LLaMA-style, CP 2 (p2p)" 2 "${LLAMA[@]}" --context-parallel-size 2
WHAT=bound_dense layout "LLaMA-style, CP 4 (a2a, key/value groups replicated)" 4 "${LLAMA[@]}" \
  --context-parallel-size 4 --cp-comm-type a2a
layout "MoE, padded to capacity" 1 "${MOE[@]}" "${PADDED[@]}"
layout "MoE EP 4 (all-to-all), ZeRO 1, padded" 4 "${MOE[@]}" "${PADDED[@]}" \
  --expert-model-parallel-size 4 --zero-stage 1
layout "MoE EP 2 (all-gather dispatcher), padded" 2 "${MOE[@]}" "${PADDED[@]}" \
  --expert-model-parallel-size 2 --moe-token-dispatcher-type allgather
layout "MoE TP 2 (experts split), padded" 2 "${MOE[@]}" "${PADDED[@]}" --tensor-model-parallel-size 2
layout "MoE TP 2 + SP, experts whole over EP 2, padded" 2 "${MOE[@]}" "${PADDED[@]}" \
  --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1 \
  --expert-model-parallel-size 2
layout "MoE PP 2, padded" 2 "${MOE[@]}" "${PADDED[@]}" --pipeline-model-parallel-size 2
layout "MoE, full recomputation, padded" 1 "${MOE[@]}" "${PADDED[@]}" \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
layout "MoE with a shared expert (DeepSeek routing), padded" 1 --model moe-tiny \
  --hidden-size 128 --num-attention-heads 4 "${PADDED[@]}"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
