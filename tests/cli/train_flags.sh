#!/bin/bash
# Command-line test: flags and environment variables of tessera-train do what they say, checked
# on what the run reports (not only its exit code). Usage: train_flags.sh BUILD_BIN_DIR
#  - TESSERA_DISTRIBUTED_TIMEOUT_SECONDS and TESSERA_CHECK_COLLECTIVES reach the runtime unless
#    --distributed-timeout-minutes / --check-collectives are given (flags win);
#  - --timing-log-level 1 prints rank 0's phase times, 2 also their min/max over all ranks.
BIN="${1:?usage: train_flags.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" train-flags-test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }
FLAGS=(--model gpt2-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 2
       --global-batch-size 2 --num-threads 1)

# settings ENV... -- FLAGS...: the run's "distributed:" log line.
settings() {
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  # Whatever the caller's environment holds, only the variables given here are set.
  env -u TESSERA_CHECK_COLLECTIVES -u TESSERA_DISTRIBUTED_TIMEOUT_SECONDS "${envs[@]}" \
    "$BIN" "${FLAGS[@]}" "$@" 2>"$TMP/err" | grep '^distributed: '
}
check "defaults: 600 s, checks off" [ "$(settings --)" = \
  "distributed: watchdog timeout 600 s, collective consistency checks off" ]
check "TESSERA_DISTRIBUTED_TIMEOUT_SECONDS=7 is honoured" [ "$(settings TESSERA_DISTRIBUTED_TIMEOUT_SECONDS=7 --)" = \
  "distributed: watchdog timeout 7 s, collective consistency checks off" ]
check "--distributed-timeout-minutes wins over the variable" \
  [ "$(settings TESSERA_DISTRIBUTED_TIMEOUT_SECONDS=7 -- --distributed-timeout-minutes 2)" = \
  "distributed: watchdog timeout 120 s, collective consistency checks off" ]
check "TESSERA_CHECK_COLLECTIVES=1 is honoured" [ "$(settings TESSERA_CHECK_COLLECTIVES=1 --)" = \
  "distributed: watchdog timeout 600 s, collective consistency checks on" ]
check "--check-collectives turns them on" [ "$(settings -- --check-collectives)" = \
  "distributed: watchdog timeout 600 s, collective consistency checks on" ]

# --timing-log-level at DP 2: level 1 one breakdown line per log line, level 2 a second one.
timing() {
  timeout 120 mpirun --oversubscribe -np 2 "$BIN" --model gpt2-tiny --mock-data --train-iters 2 \
    --lr 1e-3 --micro-batch-size 2 --global-batch-size 4 --num-threads 1 --log-interval 1 \
    --timing-log-level "$1" >"$TMP/out" 2>"$TMP/err"
}
check "--timing-log-level 1 runs" timing 1
check "  rank 0's breakdown on each of 2 log lines" \
  [ "$(grep -c '^ time (ms) per iteration on rank 0 | forward: ' "$TMP/out")" -eq 2 ]
check "  and no min/max line" [ "$(grep -c 'min/max over' "$TMP/out")" -eq 0 ]
check "--timing-log-level 2 runs" timing 2
check "  min/max over both ranks on each log line" \
  [ "$(grep -cE '^ time \(ms\) per iteration, min/max over 2 ranks \| forward: [0-9.]+/[0-9.]+ \|' "$TMP/out")" -eq 2 ]

echo "train_flags: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
