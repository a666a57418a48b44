#!/bin/bash
# TensorBoard event files from tessera-train, read back by an independent reader
# (read_tfevents.py: Python's protobuf runtime and crcmod's CRC-32C): one file, written by the
# last rank, that starts with "brain.Event:2" and holds Megatron's tags with exactly the values of
# the run's --metrics-file (as float32), each "vs samples" at the consumed samples; the log
# interval; the opt-in tags; DeepSpeed's "tensorboard" block; a directory that cannot be created
# is one error line and exit 2. Usage: tensorboard.sh BUILD_BIN_DIR
BIN="${1:?usage: tensorboard.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" tensorboard
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
READER="$(dirname "$0")/read_tfevents.py"
FLAGS=(--model mixtral-tiny --mock-data --lr 1e-3 --train-iters 6 --micro-batch-size 1
       --global-batch-size 4 --eval-interval 3 --eval-iters 1 --log-interval 100 --num-threads 1)

# check_run DIR METRICS INTERVAL OPT_IN(0|1): the reader's records against the metrics file.
check_run() {
  local files
  files=$(ls "$1"/events.out.tfevents.* 2>/dev/null | wc -l)
  [ "$files" -eq 1 ] || { echo "  $files event files in $1" >&2; return 1; }
  /usr/bin/python3 "$READER" "$1"/events.out.tfevents.* > "$TMP/records" || return 1
  /usr/bin/python3 - "$TMP/records" "$2" "$3" "$4" <<'PY'
import json, math, struct, sys
records = [json.loads(l) for l in open(sys.argv[1])]
metrics = [json.loads(l) for l in open(sys.argv[2])]
interval, opt_in = int(sys.argv[3]), sys.argv[4] == "1"
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
errors = []
if records[0].get("file_version") != "brain.Event:2":
    errors.append(f"first record {records[0]}")
got = {}
for r in records[1:]:
    got.setdefault(r["tag"], {})[r["step"]] = r["value"]
want = {}
def put(tag, step, value):
    want.setdefault(tag, {})[step] = f32(value)
for m in metrics:
    it, samples = m["iteration"], m["consumed_samples"]
    if "val_loss" in m:
        for tag, v in [("lm loss validation", m["val_loss"])] + (
                [("lm loss validation ppl", math.exp(min(20.0, m["val_loss"])))] if opt_in else []):
            put(tag, it, v)
            put(tag + " vs samples", samples, v)
    if it % interval:
        continue
    for tag, key in [("learning-rate", "lr"), ("lm loss", "lm_loss"), ("loss-scale", "loss_scale"),
                     ("grad-norm", "grad_norm")]:
        put(tag, it, m[key])
        put(tag + " vs samples", samples, m[key])
    put("batch-size", it, 4)
    put("batch-size vs samples", samples, 4)
    put("load_balancing_loss", it, m["moe_aux_loss"])
    put("z_loss", it, m["moe_z_loss"])
    put("moe-dropped-fraction", it, m["moe_dropped_fraction"])
    if opt_in:
        put("world-size", it, 2)
        put("world-size vs samples", samples, 2)
        for tag, key in [("params-norm", "params_norm"), ("num-zeros", "num_zeros")]:
            put(tag, it, m[key])
            put(tag + " vs samples", samples, m[key])
        for layer in m["moe_layers"]:
            put(f"moe/load_balancing_loss_layer_{layer['layer']}", it, layer["aux_loss"])
# Values only the writing rank knows (its times, memory, throughput; the metrics file is rank
# 0's): present at every logged iteration, positive.
measured = ["iteration-time", "forward-time", "backward-time", "optimizer-time", "send-time",
            "recv-time", "grads-all-reduce-time", "mem-allocated-bytes", "mem-max-allocated-bytes",
            "mem-reserved-bytes", "throughput", "tokens-per-second", "moe/z_loss_layer_0",
            "moe/dropped_fraction_layer_0", "moe/load_balancing_loss_layer_1",
            "moe/z_loss_layer_1", "moe/dropped_fraction_layer_1"]
logged = sorted(m["iteration"] for m in metrics if m["iteration"] % interval == 0)
for tag in measured:
    if not opt_in:
        if tag in got: errors.append(f"opt-in tag {tag} written without its flag")
        continue
    if sorted(got.get(tag, {})) != logged: errors.append(f"{tag}: steps {sorted(got.get(tag, {}))}")
for tag in ["iteration-time", "forward-time", "backward-time", "mem-allocated-bytes",
            "mem-reserved-bytes", "throughput", "tokens-per-second"]:
    if opt_in and not all(v > 0 for v in got.get(tag, {}).values()): errors.append(f"{tag} <= 0")
for tag, steps in want.items():
    if got.get(tag) != steps:
        errors.append(f"{tag}: got {got.get(tag)}, want {steps}")
extra = set(got) - set(want) - set(measured)
if extra: errors.append(f"unexpected tags {sorted(extra)}")
for e in errors: print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
}

# Every opt-in flag, interval 1, under tensor parallelism with --moe-per-layer-logging.
run 2 "${FLAGS[@]}" --tensor-model-parallel-size 2 --tensorboard-dir "$TMP/tb1" \
  --metrics-file "$TMP/m1.jsonl" --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard \
  --log-memory-to-tensorboard --log-throughput --log-world-size-to-tensorboard \
  --log-params-norm --log-num-zeros-in-grad --moe-per-layer-logging
check "every flag: exit 0" [ $? -eq 0 ]
check "every flag: the reader gets every tag and value" check_run "$TMP/tb1" "$TMP/m1.jsonl" 1 1

# The defaults at interval 2, data parallel, queue of one event.
run 2 "${FLAGS[@]}" --tensorboard-dir "$TMP/tb2" --tensorboard-log-interval 2 \
  --tensorboard-queue-size 1 --metrics-file "$TMP/m2.jsonl"
check "interval 2: exit 0" [ $? -eq 0 ]
check "interval 2: Megatron's default tags on even iterations" \
  check_run "$TMP/tb2" "$TMP/m2.jsonl" 2 0

# DeepSpeed's block: output_path/job_name.
cat > "$TMP/ds.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1,
 "tensorboard": {"enabled": true, "output_path": "$TMP/ds_tb", "job_name": "job1"}}
JSON
run 1 "${FLAGS[@]}" --deepspeed --deepspeed_config "$TMP/ds.json" --metrics-file "$TMP/m3.jsonl"
check "deepspeed tensorboard block: exit 0" [ $? -eq 0 ]
check "deepspeed tensorboard block: output_path/job_name" \
  check_run "$TMP/ds_tb/job1" "$TMP/m3.jsonl" 1 0

check "uncreatable directory: one line, exit 2" \
  expect_error 2 "--tensorboard-dir /proc/tessera/tb: cannot create the directory" \
  --tensorboard-dir /proc/tessera/tb

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
