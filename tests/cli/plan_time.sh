#!/bin/bash
# tessera-plan's step-time side (plan/step_time.h, plan/search.h), what can be checked without a
# clock: --calibrate writes a description --evaluate reads back (--quick sizes, 1 and 2 ranks);
# the JSON's components add up to the step; --explain shows the same step; the search ranks its
# candidates by step time and the first one's printed command, evaluated alone, predicts the
# same step; storage rates calibrated and an NVMe optimizer-offload layout priced; and bad
# input — an unknown machine key, a model that fits nowhere, constraints no
# layout meets, a missing machine — is one line and exit code 2. (How close the predictions come
# to measured steps is a benchmark, bench/plan_time.sh: wall-clock figures are not asserted here.)
# Usage: plan_time.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: plan_time.sh BUILD_BIN_DIR}"
source "$(dirname "$0")/lib.bash" plan_time
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PLAN="$BIN_DIR/tessera-plan"
A100="$(dirname "$0")/../../examples/machines/dgx-a100.json"
COMMON=(--mock-data --lr 1e-3 --train-iters 2 --eval-interval 0)
GPT=(--model gpt2-tiny --hidden-size 256 --num-attention-heads 4 --num-layers 4
     --global-batch-size 8)
BIG=(--model gpt2-tiny --seq-length 2048 --max-position-embeddings 2048 --vocab-size 51200 --fp16
     --num-layers 24 --hidden-size 2304 --num-attention-heads 24 --global-batch-size 64)

calibrated() {  # --calibrate --quick with 2 ranks then 1; --evaluate reads the result
  timeout 120 mpirun --oversubscribe -np 2 "$PLAN" --calibrate --quick --machine "$TMP/m.json" \
    --name "test machine" >/dev/null &&
    "$PLAN" --calibrate --quick --machine "$TMP/m.json" >/dev/null &&
    "$PLAN" --evaluate --world-size 2 --machine "$TMP/m.json" --json "${COMMON[@]}" "${GPT[@]}" \
      --micro-batch-size 2 --zero-stage 1 >"$TMP/plan.json" &&
    /usr/bin/python3 - "$TMP/m.json" "$TMP/plan.json" <<'PY'
import json, sys
m, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert m["kind"] == "measured" and m["name"] == "test machine", m["name"]
assert sorted(c["ranks_per_host"] for c in m["configurations"]) == [1, 2]
two = [c for c in m["configurations"] if c["ranks_per_host"] == 2][0]
assert 0 <= two["intra_host"]["overlap"] <= 1 and two["intra_host"]["all_reduce"]["bus_bytes_per_s"] > 0
assert all(r > 0 for k in two["kernels"].values() for curve in k.values() for _, r in curve)
assert p["step_time_s"] > 0 and p["machine"]["ranks_per_host"] == 2, p
assert abs(sum(p["components_s"].values()) - p["step_time_s"]) <= 1e-9 * p["step_time_s"]
# The products' part of compute, per rank and the critical rank's (gemm_s's prediction).
assert 0 < p["compute_gemm_s"] < p["components_s"]["compute"], p
assert p["ranks"][p["critical_rank"]]["compute_gemm_s"] == p["compute_gemm_s"], p["ranks"]
PY
}
check "a calibrated description reads back and predicts" calibrated

# Context parallelism: each type's exchanges in the layers' collectives, on the calibrated machine.
context_parallel() {
  for type in p2p all_gather a2a; do
    "$PLAN" --evaluate --world-size 2 --machine "$TMP/m.json" --json "${COMMON[@]}" "${GPT[@]}" \
      --micro-batch-size 2 --context-parallel-size 2 --cp-comm-type "$type" >"$TMP/cp.json" ||
      return 1
    /usr/bin/python3 - "$TMP/cp.json" <<'PY' || return 1
import json, sys
p = json.load(open(sys.argv[1]))
c = p["components_s"]
assert p["step_time_s"] > 0 and c["tp_comm"] > 0 and c["dp_comm"] > 0, c
assert abs(sum(c.values()) - p["step_time_s"]) <= 1e-9 * p["step_time_s"]
PY
  done
}
check "context-parallel layouts are priced" context_parallel

searched_cp_ep() {  # the search tries context and expert parallelism, and prices them
  "$PLAN" --world-size 2 --machine "$TMP/m.json" --top 1000 "${COMMON[@]}" \
    --model mixtral-tiny --global-batch-size 8 >"$TMP/search" &&
    grep -q "^ *[0-9]*\. TP 1, CP 2, PP 1, DP 1, mbs" "$TMP/search" &&
    grep -q "^ *[0-9]*\. TP 1, PP 1, DP 2, EP 2, mbs" "$TMP/search" &&
    grep -q -- "--context-parallel-size 2" "$TMP/search" &&
    grep -q -- "--expert-model-parallel-size 2" "$TMP/search"
}
check "the search tries context and expert parallelism" searched_cp_ep
searched_ulysses() {  # --ds-sequence-parallel-size fixes CP (a2a): every candidate at CP 2
  "$PLAN" --world-size 2 --machine "$TMP/m.json" --top 1000 "${COMMON[@]}" "${GPT[@]}" \
    --global-batch-size 8 --ds-sequence-parallel-size 2 >"$TMP/search" &&
    [ "$(grep -c "^ *[0-9]*\. " "$TMP/search")" -gt 0 ] &&
    ! grep "^ *[0-9]*\. " "$TMP/search" | grep -qv "CP 2, PP 1, DP 1"
}
check "a search with --ds-sequence-parallel-size keeps its CP" searched_ulysses

offloaded() {  # --calibrate --nvme-path adds storage rates; an NVMe optimizer-offload layout is
  # then priced: offload_io > 0, the components still add up, --explain shows the I/O
  local swap
  swap="$(mktemp -d "$BIN_DIR/../tessera-plan-test.XXXXXX")" || return 1
  local flags=(--evaluate --world-size 1 --machine "$TMP/s.json" "${COMMON[@]}" "${GPT[@]}"
               --micro-batch-size 2 --zero-stage 1 --offload-optimizer-nvme-path "$swap")
  "$PLAN" --calibrate --quick --machine "$TMP/s.json" --nvme-path "$swap" >/dev/null &&
    [ -z "$(ls -A "$swap")" ] &&
    "$PLAN" --calibrate --quick --machine "$TMP/s.json" >/dev/null &&  # keeps the storage rates
    "$PLAN" "${flags[@]}" --json >"$TMP/plan.json" &&
    "$PLAN" "${flags[@]}" --explain 0 >"$TMP/out" &&
    grep -q "NVMe optimizer offload: .* GB read + .* GB written an iteration" "$TMP/out" &&
    /usr/bin/python3 - "$TMP/s.json" "$TMP/plan.json" <<'PY'
import json, sys
m, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
s = m["configurations"][0]["storage"]
assert s["read_bytes_per_s"] > 0 and s["write_bytes_per_s"] > 0, s
c = p["components_s"]
assert c["offload_io"] > 0, c
assert abs(sum(c.values()) - p["step_time_s"]) <= 1e-9 * p["step_time_s"]
PY
  local rc=$?
  rm -rf "$swap"
  return $rc
}
check "storage rates calibrated; optimizer offload priced" offloaded

explained() {  # --explain's passes add up to the step's compute and TP parts; its last line is
  # the step --evaluate prints
  "$PLAN" --evaluate --world-size 16 --machine "$A100" "${COMMON[@]}" "${BIG[@]}" \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 2 \
    --explain 15 >"$TMP/out" &&
    grep -q "a layer's forward (x " "$TMP/out" && grep -q "the head (x " "$TMP/out" &&
    /usr/bin/python3 - "$TMP/out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
explained = float(re.search(r"\(the step: rank \d+'s ([0-9.]+) ms\)", text).group(1))
passes = sum(float(t) for t in re.findall(r"total [0-9.]+ ms, x [0-9.]+ = ([0-9.]+) ms", text))
parts = re.search(r"step: compute ([0-9.]+) \+ layers' collectives \(TP, CP\) ([0-9.]+)", text)
assert abs(passes - float(parts.group(1)) - float(parts.group(2))) <= 1e-2, (passes, parts.groups())
step = float(re.search(r"step time on .*: ([0-9.]+) s, MFU", text).group(1))
assert abs(explained / 1e3 - step) <= 1e-4 * step, (explained, step)
PY
}
check "--explain shows the step --evaluate predicts" explained

searched() {  # candidates sorted by step; the first one's command evaluated alone agrees
  "$PLAN" --world-size 16 --machine "$A100" --top 5 "${COMMON[@]}" "${BIG[@]}" >"$TMP/search" &&
    /usr/bin/python3 - "$TMP/search" "$PLAN" "$A100" <<'PY'
import json, re, subprocess, sys
text = open(sys.argv[1]).read()
steps = [float(s) for s in re.findall(r"step ([0-9.]+) s, MFU", text)]
assert len(steps) == 5 and steps == sorted(steps), steps
command = re.search(r"mpirun -np 16 tessera-train (.*)", text).group(1).split()
out = subprocess.run([sys.argv[2], "--evaluate", "--world-size", "16", "--machine", sys.argv[3],
                      "--json"] + command, capture_output=True, text=True, check=True)
alone = json.loads(out.stdout)["step_time_s"]
assert abs(alone - steps[0]) <= 1e-4 * steps[0], (alone, steps[0])
PY
}
check "the search ranks by step and prints what it evaluated" searched

bad() {  # bad PATTERN ARGS...: one stderr line matching PATTERN, exit code 2
  local pattern="$1"
  shift
  "$PLAN" "$@" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  [ $code -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$pattern" "$TMP/err" || {
    echo "  exit $code; stderr: $(cat "$TMP/err")" >&2
    return 1
  }
}
sed '0,/"overlap": 1.0/s//"overlap": 1.0, "bandwith": 1/' "$A100" >"$TMP/typo.json"
check "an unknown machine key" bad "typo.json.configurations\[0\].intra_host.bandwith: unknown key" \
  --world-size 16 --machine "$TMP/typo.json" "${COMMON[@]}" "${BIG[@]}"
check "a model that fits nowhere" bad "no layout of 8 ranks fits in 80.00 GiB a rank" \
  --world-size 8 --machine "$A100" "${COMMON[@]}" "${BIG[@]}" --num-layers 128 \
  --hidden-size 25600 --num-attention-heads 160 --global-batch-size 8
check "constraints no layout meets" bad "not divisible by TP\*CP\*PP" \
  --world-size 16 --machine "$A100" "${COMMON[@]}" "${BIG[@]}" --tensor-model-parallel-size 3
check "a missing machine file" bad "cannot read the file" \
  --evaluate --world-size 2 --machine "$TMP/none.json" "${COMMON[@]}" "${GPT[@]}"
check "calibrating without a file" bad "--calibrate needs --machine FILE" --calibrate
check "a CP size that does not divide the world" bad "not divisible by TP\*CP\*PP = 4" \
  --world-size 2 --machine "$TMP/m.json" "${COMMON[@]}" "${GPT[@]}" --global-batch-size 8 \
  --context-parallel-size 4
check "a layout the time model does not cover" bad "does not cover parameter offload" \
  --evaluate --world-size 2 --machine "$TMP/m.json" "${COMMON[@]}" "${GPT[@]}" --zero-stage 3 \
  --pipeline-model-parallel-size 2 --offload-param-nvme-path "$TMP"
check "offload on a machine without storage rates" bad \
  "machine 'DGX A100.*' has no storage rates for NVMe offload: measure them with tessera-plan --calibrate --nvme-path DIR" \
  --evaluate --world-size 2 --machine "$A100" "${COMMON[@]}" "${GPT[@]}" --zero-stage 1 \
  --offload-optimizer-nvme-path "$TMP"
check "--nvme-path without --calibrate" bad "--nvme-path applies to --calibrate only" \
  --evaluate --world-size 2 --nvme-path "$TMP" "${COMMON[@]}" "${GPT[@]}"
check "--nvme-path that is not a directory" bad "--nvme-path $TMP/none: not a directory" \
  --calibrate --machine "$TMP/n.json" --nvme-path "$TMP/none"
check "a flag that would be ignored" bad "needs --evaluate and --machine, without --json" \
  --evaluate --world-size 2 --json --machine "$A100" --explain 0 "${COMMON[@]}" "${GPT[@]}"
check "a rank the layout does not have" bad "the layout has ranks 0..1" \
  --evaluate --world-size 2 --machine "$A100" --explain 2 "${COMMON[@]}" "${GPT[@]}"

sed 's/"hosts": 384/"hosts": 2/' "$A100" >"$TMP/two-hosts.json"
check "a machine with too few hosts" bad "the layout needs 32 ranks = 4 hosts of 8 ranks" \
  --evaluate --world-size 32 --machine "$TMP/two-hosts.json" "${COMMON[@]}" "${BIG[@]}"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
