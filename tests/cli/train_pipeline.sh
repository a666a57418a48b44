#!/bin/bash
# tessera-train with --pipeline-model-parallel-size: a split that cannot be made, a micro-batch
# count the interleaved schedule cannot run, more stages than layers and half-given recompute
# flags each get one error line and exit code 2 on every rank (no hang); --timeline-file writes
# a Chrome trace holding every rank's forwards, backwards, transfers and optimizer step.
# Usage: train_pipeline.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: train_pipeline.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" train-pp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--mock-data --train-iters 2 --lr 1e-3 --eval-iters 0 --num-threads 1 --model gpt2-tiny)

check "layers not divisible by PP" expect_error 2 \
  "--num-layers 3 is not divisible by --pipeline-model-parallel-size 2" \
  --num-layers 3 --pipeline-model-parallel-size 2
check "more stages than layers" expect_error 4 \
  "--pipeline-model-parallel-size 4 is larger than the 2 layers" \
  --pipeline-model-parallel-size 4
check "uneven split that does not add up" expect_error 2 \
  "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers do not add up" \
  --num-layers 4 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 \
  --decoder-last-pipeline-num-layers 2
check "layers not divisible into virtual stages" expect_error 2 \
  "--num-layers 6 is not divisible by --pipeline-model-parallel-size 2 x --num-layers-per-virtual-pipeline-stage 2" \
  --num-layers 6 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
check "micro-batches not a multiple of PP when interleaved" expect_error 2 \
  "the interleaved schedule needs the number of micro-batches per iteration .3 = global batch" \
  --num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --micro-batch-size 1 --global-batch-size 3
check "overlap asked for with virtual stages (not honoured there)" expect_error 2 \
  "--overlap-grad-reduce is not supported with --num-layers-per-virtual-pipeline-stage" \
  --num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --overlap-grad-reduce
check "a timeline iteration after the last" expect_error 2 \
  "--timeline-iteration 5 is after the last iteration .2." --timeline-iteration 5 \
  --timeline-file "$TMP/t.json"
check "full recompute without its method" expect_error 2 \
  "--recompute-granularity full needs --recompute-method" --recompute-granularity full

timeline() {
  run 2 "${FLAGS[@]}" --num-layers 4 --pipeline-model-parallel-size 2 --micro-batch-size 1 \
    --global-batch-size 4 --timeline-file "$TMP/trace.json" || return 1
  # nlohmann::json writes keys sorted: args, cat, dur, name, ph, pid, ...
  count() { grep -o "\"cat\":\"$1\",\"dur\":[^,]*,\"name\":\"[^\"]*\",\"ph\":\"X\",\"pid\":$2," "$TMP/trace.json" | wc -l; }
  [ "$(count forward 0)" -eq 4 ] && [ "$(count backward 0)" -eq 4 ] &&
    [ "$(count forward 1)" -eq 4 ] && [ "$(count backward 1)" -eq 4 ] &&
    [ "$(count optimizer 0)" -eq 1 ] && [ "$(count optimizer 1)" -eq 1 ] &&
    [ "$(count send 0)" -ge 4 ] && [ "$(count recv 1)" -ge 4 ] &&
    grep -q "^> timeline of iteration 2 written to .*idle share of the pipeline phase per rank: 0\.[0-9]* 0\.[0-9]*;" "$TMP/out"
}
check "--timeline-file writes every rank's phases" timeline

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
