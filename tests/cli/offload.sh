#!/bin/bash
# ZeRO-Offload / ZeRO-Infinity (docs/offload.md): optimizer state (ZeRO 1-3) and parameters
# (ZeRO 3, DP 1 and 2, with TP) in swap files, bitwise equal to the same run in memory; exact
# resume (with and without parameter offload); a checkpoint of an offloaded run loaded without
# offload under another layout; the save streamed one sub-group window at a time, its files
# those of the run in memory; swap files removed at exit and after a crash; bad settings one
# line and exit 2 on every rank; a full disk refused up front.
# The swap directory is under the build tree (the repository's file system): tmpfs accepts
# unaligned direct I/O and would hide alignment bugs.
# Usage: offload.sh BUILD_BIN_DIR
set -u
BIN_DIR="${1:?usage: offload.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
source "$(dirname "$0")/lib.bash" offload
NVME="$(mktemp -d "$BIN_DIR/../tessera-offload-test.XXXXXX")"
MOUNTS=()
cleanup() {
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$TMP" "$NVME"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--model gpt2-tiny --mock-data --eval-iters 0 --num-threads 1 --micro-batch-size 2
       --lr 1e-3 --adam-eps 1e-4)

# field FILE KEY: KEY of every line of a metrics file, one per line, as written (exact text).
fields() {
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    print(repr(json.loads(l)[sys.argv[2]]))' "$1" "$2"
}
# same_run A B: the metrics (loss and grad norm, every iteration) and exported weights of runs
# A and B ($TMP/A.jsonl, $TMP/A.safetensors) are equal bit for bit.
same_run() {
  local keys=(lm_loss grad_norm)
  grep -q '"num_zeros"' "$TMP/$1.jsonl" && keys+=(num_zeros)
  for key in "${keys[@]}"; do
    diff <(fields "$TMP/$1.jsonl" $key) <(fields "$TMP/$2.jsonl" $key) >&2 || return 1
  done
  cmp "$TMP/$1.safetensors" "$TMP/$2.safetensors" >&2
}
# train NAME NP FLAGS...: trains, metrics and weights named NAME.
train() {
  local name="$1" np="$2"
  shift 2
  run "$np" "${FLAGS[@]}" --metrics-file "$TMP/$name.jsonl" \
    --export-weights "$TMP/$name.safetensors" "$@" || {
    echo "  $name failed:" >&2
    tail -3 "$TMP/err" >&2
    return 1
  }
}
# Optimizer state in sub-groups of 1000 elements (rounded up to the alignment): runs are cut at
# many points, a sub-group straddles parameters, the last one is short.
OPT=(--offload-optimizer-nvme-path "$NVME" --offload-sub-group-size 1000)

# Parameters (ZeRO 3) all on NVMe: gpt2-tiny is far below the default max_in_cpu of 1e9.
PARAM=(--offload-param-nvme-path "$NVME" --offload-param-max-in-cpu 0)
# ZeRO 3 with every unit sharded (gpt2-tiny's are below the default persistence threshold).
Z3=(--zero-stage 3 --stage3-param-persistence-threshold 0)

# equal NAME NP BACKEND OFFLOAD-FLAGS -- LAYOUT-FLAGS: the offloaded run equals the in-memory
# one; it moved bytes through the swap files, reported them (each offload its line; parameters:
# some units swapped), and left no swap file behind.
equal() {
  local name="$1" np="$2" backend="$3"
  shift 3
  local offload=()
  while [ "$1" != "--" ]; do offload+=("$1"); shift; done
  shift
  train "$name.mem" "$np" --train-iters 3 "$@" || return 1
  train "$name.nvme" "$np" --train-iters 3 "$@" "${offload[@]}" --aio-backend "$backend" ||
    return 1
  same_run "$name.mem" "$name.nvme" || return 1
  case " ${offload[*]} " in *" --offload-optimizer-nvme-path "*)
    grep -q "^> offload: optimizer state on NVMe under $NVME" "$TMP/out" || return 1 ;;
  esac
  case " ${offload[*]} " in *" --offload-param-nvme-path "*)
    grep -q "^> offload: parameters on NVMe under $NVME: .*this rank: [1-9][0-9]* units swapped" \
      "$TMP/out" || return 1 ;;
  esac
  grep -q " io: [0-9.]* GB read, [0-9.]* GB written, .* hidden |" "$TMP/out" &&
    [ "$(fields "$TMP/$name.nvme.jsonl" io_write_bytes | tail -1)" -gt 0 ] &&
    [ "$(fields "$TMP/$name.nvme.jsonl" io_read_bytes | tail -1)" -gt 0 ] &&
    [ -z "$(ls -A "$NVME")" ]
}
check "ZeRO 1, DP 1, fp32, io_uring: offloaded = in memory, bitwise" \
  equal z1dp1 1 io_uring "${OPT[@]}" -- --zero-stage 1
check "ZeRO 1, DP 2, bf16, threads, pipelined, 2 buffers" \
  equal z1dp2 2 threads "${OPT[@]}" --offload-pipeline --offload-buffer-count 2 -- \
  --zero-stage 1 --bf16
check "ZeRO 2, DP 1, bf16, io_uring, pipelined, fast init" \
  equal z2dp1 1 io_uring "${OPT[@]}" --offload-pipeline --offload-fast-init -- \
  --zero-stage 2 --bf16
check "ZeRO 2, DP 2, fp32, threads" \
  equal z2dp2 2 threads "${OPT[@]}" --offload-buffer-count 3 -- --zero-stage 2
check "ZeRO 3, DP 2, bf16, io_uring: optimizer state and parameters offloaded" \
  equal z3dp2 2 io_uring "${OPT[@]}" "${PARAM[@]}" -- "${Z3[@]}" --bf16
check "ZeRO 3, TP 2 x DP 2, fp32, threads: optimizer state and parameters offloaded" \
  equal z3tp2dp2 4 threads "${OPT[@]}" "${PARAM[@]}" -- "${Z3[@]}" --tensor-model-parallel-size 2
# The owned fp32 gradients go to the swap at the accumulation boundary (distributed/
# gradient_offload.h): with gradient accumulation (4 micro-batches), the norm's zero count and
# clipping; with gradients changed after the reduction (sequence parallelism's completion over
# TP, the tied embedding's sum between the pipeline's ends), whose parts wait for the step; an
# fp16 overflow skipping the step as in memory.
check "ZeRO 2, DP 2, bf16, 4 micro-batches, zeros counted, clipped: gradients offloaded" \
  equal accum 2 io_uring "${OPT[@]}" --offload-pipeline -- --zero-stage 2 --bf16 \
  --global-batch-size 16 --log-num-zeros-in-grad --clip-grad 0.05
# gradients_held NAME: the memory report's measured gradients (MiB) of run NAME's output.
gradients_held() {
  sed -n 's/^>   gradients *[0-9.]* | *\([0-9.]*\) |.*/\1/p' "$TMP/$1.out"
}
held_less() {
  local stage="$1"
  train held.mem 2 --train-iters 2 --zero-stage "$stage" && cp "$TMP/out" "$TMP/held.mem.out" &&
    train held.nvme 2 --train-iters 2 --zero-stage "$stage" "${OPT[@]}" &&
    cp "$TMP/out" "$TMP/held.nvme.out" || return 1
  local mem nvme
  mem=$(gradients_held held.mem) nvme=$(gradients_held held.nvme)
  echo "  ZeRO $stage: gradients held after a step: $mem MiB in memory, $nvme MiB offloaded" >&2
  python3 -c "import sys; sys.exit(not (float('$nvme') < 0.1 * float('$mem')))"
}
check "ZeRO 1, DP 2: the offloaded run holds under a tenth of the in-memory run's gradients" \
  held_less 1
check "ZeRO 2, DP 2: the offloaded run holds under a tenth of the in-memory run's gradients" \
  held_less 2
# few_held SHARE NAME NP BACKEND OFFLOAD -- LAYOUT: equal, and the gradients held until the
# step (the late ones: norms, biases, replicated key/value rows; not whole layers) are under
# SHARE of the rank's owned elements.
few_held() {
  local share="$1"
  shift
  equal "$@" || return 1
  local line
  line=$(grep "^> offload: optimizer state on NVMe" "$TMP/out" | head -1)
  echo "  ${line#*this rank: }" | sed 's/), .*/)/' >&2
  python3 - "$line" "$share" <<'PY'
import re, sys
m = re.search(r"this rank: (\d+) elements .* (\d+) of them held until the step", sys.argv[1])
sys.exit(not (m and 0 < int(m.group(2)) < float(sys.argv[2]) * int(m.group(1))))
PY
}
# (LLaMA: no position embedding, whose gradient under SP is late too and a fifth of gpt2-tiny.)
check "ZeRO 1, TP 2 (sequence parallel) x DP 2, LLaMA, fp32: late gradients stored at the step" \
  few_held 0.02 late_sp 4 threads "${OPT[@]}" -- --zero-stage 1 --tensor-model-parallel-size 2 \
  --sequence-parallel --model llama-tiny
# (The replicated key/value rows are a tenth of llama-tiny at TP 4: 2 layers x 2 x 16 x 64.)
check "ZeRO 1, TP 4, LLaMA with 2 query groups (replicated key/value rows), bf16: late rows" \
  few_held 0.11 late_kv 4 io_uring "${OPT[@]}" -- --zero-stage 1 --tensor-model-parallel-size 4 \
  --model llama-tiny --bf16
# (Stage 0 holds the word embedding's owned part alone: 384 x 64 / 2 = 12288 of its 41376.)
check "ZeRO 2, PP 2 x DP 2, bf16: the tied embedding's gradients stored at the step" \
  few_held 0.3 late_tied 4 io_uring "${OPT[@]}" -- --zero-stage 2 --pipeline-model-parallel-size 2 \
  --global-batch-size 8 --bf16
check "ZeRO 2, DP 2, fp16: an overflow planted in iteration 2 skips the step as in memory" \
  equal overflow 2 threads "${OPT[@]}" -- --zero-stage 2 --fp16 --initial-loss-scale 128 \
  --inject-overflow-at-iteration 2
# Above, each layout runs once and each stage with both dtypes and both I/O back ends.
# OFFLOAD_FULL_MATRIX=1 runs every layout with every dtype and back end (24 runs, ~1 minute).
if [ "${OFFLOAD_FULL_MATRIX:-0}" = 1 ]; then
  for dtype in fp32 bf16; do
    dflag=()
    [ $dtype = bf16 ] && dflag=(--bf16)
    for backend in io_uring threads; do
      for layout in "z1dp1 1 --zero-stage 1" "z1dp2 2 --zero-stage 1" "z2dp1 1 --zero-stage 2" \
        "z2dp2 2 --zero-stage 2" "z3dp2 2 Z3" "z3tp2dp2 4 Z3 --tensor-model-parallel-size 2"; do
        set -- $layout
        name=$1 np=$2
        shift 2
        offload=("${OPT[@]}" --offload-pipeline)
        lay=("$@")
        if [ "$1" = Z3 ]; then
          offload+=("${PARAM[@]}")
          lay=("${Z3[@]}" "${@:2}")
        fi
        check "matrix: $name, $dtype, $backend" \
          equal "m.$name.$dtype.$backend" "$np" "$backend" "${offload[@]}" -- "${lay[@]}" "${dflag[@]}"
      done
    done
  done
fi

# DP 1: each unit's part is the whole unit; the embeddings stay in memory (max_in_cpu), the
# layers are swapped through two buffers of 3000 elements (keys of a DeepSpeed config, against
# the same config without offload_param).
dp1_params() {
  local zero='"stage": 3, "stage3_param_persistence_threshold": 0'
  echo "{\"train_batch_size\": 2, \"zero_optimization\": {$zero}}" >"$TMP/mem.json"
  cat >"$TMP/param.json" <<JSON
{"train_batch_size": 2, "zero_optimization": {$zero,
  "offload_param": {"device": "nvme", "nvme_path": "$NVME", "buffer_count": 2,
                    "buffer_size": 3000, "max_in_cpu": $1}}}
JSON
  train z3dp1.mem 1 --train-iters 3 --deepspeed --deepspeed_config "$TMP/mem.json" || return 1
  train z3dp1.nvme 1 --train-iters 3 --deepspeed --deepspeed_config "$TMP/param.json" ||
    return 1
  same_run z3dp1.mem z3dp1.nvme &&
    grep -q "^> offload: parameters on NVMe .*, $1 elements resident (max_in_cpu $1), 2 buffers" \
      "$TMP/out" &&
    [ "$(fields "$TMP/z3dp1.nvme.jsonl" io_read_bytes | tail -1)" -gt 0 ] &&
    [ -z "$(ls -A "$NVME")" ]
}
# gpt2-tiny's embeddings: (vocab 257 padded to 384 + 128 positions) x hidden 64.
check "ZeRO 3, DP 1, fp32, a DeepSpeed config: embeddings kept by max_in_cpu, layers swapped" \
  dp1_params 32768

# Exact resume: an offloaded run saves at iteration 4 and goes on to 8; a new job loads
# iteration 4 and continues, bitwise as the first; the same checkpoint loads without offload in
# another layout (DP 1, ZeRO 0) and its first loss (before any update: the loaded weights) is the
# same to rounding (the sums run in another order).
resume() {
  local ds=("${OPT[@]}" --zero-stage 1 --bf16 --offload-pipeline)
  train full 2 --train-iters 8 --save "$TMP/ckpt" --save-interval 4 "${ds[@]}" || return 1
  rm -rf "$TMP/ckpt/iter_0000008"
  echo 4 >"$TMP/ckpt/latest_checkpointed_iteration.txt"
  train resumed 2 --train-iters 8 --load "$TMP/ckpt" "${ds[@]}" || return 1
  python3 - "$TMP/full.jsonl" "$TMP/resumed.jsonl" <<'PY' || return 1
import json, sys
full = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
resumed = [json.loads(l) for l in open(sys.argv[2])]
assert [r["iteration"] for r in resumed] == [5, 6, 7, 8], resumed
for r in resumed:
    for k in ("lm_loss", "grad_norm"):
        assert r[k] == full[r["iteration"]][k], (r["iteration"], k, r[k], full[r["iteration"]][k])
PY
  cmp "$TMP/full.safetensors" "$TMP/resumed.safetensors" >&2 || return 1
  train other 1 --train-iters 5 --load "$TMP/ckpt" --bf16 --global-batch-size 4 || return 1
  python3 - "$TMP/full.jsonl" "$TMP/other.jsonl" <<'PY'
import json, sys
full = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
other = [json.loads(l) for l in open(sys.argv[2])]
assert other[0]["iteration"] == 5
assert abs(other[0]["lm_loss"] - full[5]["lm_loss"]) <= 1e-5 * full[5]["lm_loss"], other[0]
PY
}
check "exact resume of an offloaded run; its checkpoint loads in memory at DP 1" resume

# The save of an offloaded run streams its file from the optimizer's sub-group windows: it holds
# at most one window of state (master weights and two moments, 12 bytes an element, as the saved
# line reports), where the in-memory run's save holds a copy of the rank's whole state; the rank
# files are byte for byte those of the same run in memory. --async-save with the state on NVMe
# says why it saves synchronously.
streamed_save() {
  local ds=(--zero-stage 1 --bf16 --train-iters 2 --save-interval 2)
  train smem 2 "${ds[@]}" --save "$TMP/smem" || return 1
  local copy nvme group
  copy=$(sed -n 's/^> saved checkpoint .*state held for it: \([0-9.]*\) MB per rank at most (a copy in memory)$/\1/p' "$TMP/out")
  train snvme 2 "${ds[@]}" --save "$TMP/snvme" "${OPT[@]}" --async-save || return 1
  grep -q "^note: --async-save: the optimizer state is on NVMe, .* streamed from it synchronously" \
    "$TMP/out" || return 1
  nvme=$(sed -n 's/^> saved checkpoint .*state held for it: \([0-9.]*\) MB per rank at most (streamed from NVMe, one window at a time)$/\1/p' "$TMP/out")
  group=$(sed -n 's/^> offload: optimizer state .* sub-groups of \([0-9]*\)[;)].*/\1/p' "$TMP/out")
  echo "  state held by the save: $copy MB in memory, $nvme MB streamed (sub-groups of $group)" >&2
  python3 -c 'import sys
copy, nvme, group = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
assert 0 < nvme <= group * 12 / 1e6 + 5e-4 and copy > 10 * nvme, (copy, nvme, group)' \
    "$copy" "$nvme" "$group" || return 1
  for r in rank_00000 rank_00001; do
    cmp "$TMP/smem/iter_0000002/$r.safetensors" "$TMP/snvme/iter_0000002/$r.safetensors" >&2 ||
      return 1
  done
}
check "the save of an offloaded run streams one sub-group window at a time, same files" \
  streamed_save

# The same with the parameters on NVMe too (ZeRO 3): save at 2, load, continue bitwise.
resume_params() {
  local ds=("${OPT[@]}" "${PARAM[@]}" "${Z3[@]}" --bf16)
  train z3full 2 --train-iters 4 --save "$TMP/z3ckpt" --save-interval 2 "${ds[@]}" || return 1
  rm -rf "$TMP/z3ckpt/iter_0000004"
  echo 2 >"$TMP/z3ckpt/latest_checkpointed_iteration.txt"
  train z3resumed 2 --train-iters 4 --load "$TMP/z3ckpt" "${ds[@]}" || return 1
  for key in lm_loss grad_norm; do
    diff <(fields "$TMP/z3full.jsonl" $key | tail -2) <(fields "$TMP/z3resumed.jsonl" $key) >&2 ||
      return 1
  done
  cmp "$TMP/z3full.safetensors" "$TMP/z3resumed.safetensors" >&2
}
check "exact resume of a run with its parameters offloaded (ZeRO 3)" resume_params

# A run killed during its optimizer step (the swap files half updated) leaves its swap
# directory behind; the next run removes it, resumes from the last checkpoint and continues
# exactly as a run never killed.
killed() {
  local ds=("${OPT[@]}" --zero-stage 2)
  train ref 2 --train-iters 4 "${ds[@]}" || return 1
  run 2 "${FLAGS[@]}" --train-iters 4 --save "$TMP/kckpt" --save-interval 2 "${ds[@]}" \
    --inject-kill-in-optimizer-step 3
  [ -n "$(ls -A "$NVME")" ] || { echo "  the killed run left no swap directory" >&2; return 1; }
  train after 2 --train-iters 4 --load "$TMP/kckpt" "${ds[@]}" || return 1
  [ -z "$(ls -A "$NVME")" ] || { echo "  a stale swap directory survived" >&2; return 1; }
  diff <(fields "$TMP/ref.jsonl" lm_loss | tail -2) <(fields "$TMP/after.jsonl" lm_loss) >&2 &&
    cmp "$TMP/ref.safetensors" "$TMP/after.safetensors" >&2
}
check "a kill during the optimizer step: swap files cleaned, resume exact" killed

# Bad settings: one line naming the key, exit 2 on every rank.
check "--dump-numerics with the optimizer state (and so the gradients) on NVMe" expect_error 2 \
  "--dump-numerics records the gradients after the step" --zero-stage 1 "${OPT[@]}" \
  --dump-numerics "$TMP/dump" --train-iters 1
check "parameter offload below ZeRO 3" expect_error 2 \
  ".*zero_optimization.offload_param (--offload-param-nvme-path) needs ZeRO stage 3: the run is at stage 2" \
  --train-iters 1 --zero-stage 2 --offload-param-nvme-path "$NVME"
check "optimizer offload without ZeRO" expect_error 2 \
  ".*offload_optimizer .* needs ZeRO stage 1, 2 or 3: the run is at stage 0" \
  --train-iters 1 --offload-optimizer-nvme-path "$NVME"
check "a missing nvme_path" expect_error 2 \
  ".*--offload-optimizer-nvme-path) \"$TMP/nowhere\" does not exist" \
  --train-iters 1 --zero-stage 1 --offload-optimizer-nvme-path "$TMP/nowhere"
check "buffer_count 1" expect_error 2 \
  ".*offload_optimizer.buffer_count (--offload-buffer-count) is 1: expected at least 2" \
  --train-iters 1 --zero-stage 1 "${OPT[@]}" --offload-buffer-count 1
check "an aio queue depth out of range" expect_error 2 \
  ".*aio.queue_depth is 0: expected an integer from 1 to 1024" \
  --train-iters 1 --zero-stage 1 "${OPT[@]}" --aio-queue-depth 0
echo '{"train_batch_size": 4, "zero_optimization": {"stage": 3, "offload_param":
  {"device": "nvme"}}}' >"$TMP/nopath.json"
check "a DeepSpeed config: device nvme without nvme_path" expect_error 2 \
  ".*zero_optimization.offload_param.nvme_path is not set" \
  --train-iters 1 --deepspeed --deepspeed_config "$TMP/nopath.json"
echo '{"train_batch_size": 4, "zero_optimization": {"stage": 1, "offload_optimizer":
  {"device": "nvme", "nvme_path": "'"$NVME"'", "buffer_count": 1}}}' >"$TMP/buffers.json"
check "a DeepSpeed config: buffer_count 1" expect_error 2 \
  ".*zero_optimization.offload_optimizer.buffer_count is 1: expected at least 2" \
  --train-iters 1 --deepspeed --deepspeed_config "$TMP/buffers.json"
echo '{"train_batch_size": 4, "aio": {"block_size": 1000}}' >"$TMP/aio.json"
check "a DeepSpeed config: an aio block size that is not a multiple of 4096" expect_error 2 \
  ".*aio.block_size is 1000" --train-iters 1 --deepspeed --deepspeed_config "$TMP/aio.json" \
  --zero-stage 1 "${OPT[@]}"

# A DeepSpeed config with DeepSpeed's names trains offloaded; device "cpu" is noted.
deepspeed_json() {
  cat >"$TMP/ds.json" <<JSON
{"train_batch_size": 4, "zero_optimization": {"stage": 2, "sub_group_size": 5000,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$NVME", "buffer_count": 3,
                        "pipeline_read": true, "pipeline_write": true, "pin_memory": true}},
 "aio": {"block_size": 65536, "queue_depth": 4, "intra_op_parallelism": 2,
         "single_submit": false, "overlap_events": true}}
JSON
  run 2 "${FLAGS[@]}" --train-iters 2 --deepspeed --deepspeed_config "$TMP/ds.json" || return 1
  grep -q "^> offload: optimizer state on NVMe under $NVME.*3 buffers.*pipeline read on / write on" \
    "$TMP/out" || return 1
  echo '{"train_batch_size": 4, "zero_optimization": {"stage": 1, "offload_optimizer":
    {"device": "cpu"}}}' >"$TMP/cpu.json"
  run 2 "${FLAGS[@]}" --train-iters 1 --deepspeed --deepspeed_config "$TMP/cpu.json" &&
    grep -q '^note: offload_optimizer device "cpu" .*stays in host memory' "$TMP/out" || return 1
  # Megatron's flag means the same.
  run 2 "${FLAGS[@]}" --train-iters 1 --zero-stage 1 --optimizer-cpu-offload \
    --optimizer-offload-fraction 0.5 &&
    grep -q '^note: offload_optimizer device "cpu" (--optimizer-cpu-offload)' "$TMP/out"
}
check "a DeepSpeed config's offload and aio blocks; device cpu is noted" deepspeed_json

# Root only (mounts): a read-only nvme_path, and a file system too small for the swap files,
# each refused before training starts. Skipped (and said so) without the privilege.
if [ "$(id -u)" -eq 0 ] && mkdir -p "$TMP/ro" "$TMP/small" &&
  mount --bind "$TMP/ro" "$TMP/ro" 2>/dev/null; then
  MOUNTS+=("$TMP/ro")
  mount -o remount,ro,bind "$TMP/ro"
  check "a read-only nvme_path" expect_error 2 \
    ".*--offload-optimizer-nvme-path) \"$TMP/ro\" is not writable (Read-only file system)" \
    --train-iters 1 --zero-stage 1 --offload-optimizer-nvme-path "$TMP/ro"
  mount -t tmpfs -o size=64k tmpfs "$TMP/small" && MOUNTS+=("$TMP/small")
  check "a file system too small for the swap files" expect_error 2 \
    ".*\"$TMP/small\" has [0-9]* bytes free but the swap files need [0-9]*" \
    --train-iters 1 --zero-stage 1 --offload-optimizer-nvme-path "$TMP/small"
else
  echo "SKIPPED: read-only and full file systems (mounting needs root)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
