#!/bin/bash
# The flight recorder (--flight-recorder-dir) and its reader, tessera-flight:
#  - one rank stops before its collectives (test hook --inject-stop-rank) under TP 2 x DP 2:
#    the watchdog ends the job (exit 124) well within the guard, every rank writes a dump, and
#    tessera-flight names the stopped rank, the all-reduce its TP partner waited in and the
#    group, and the DP collective its DP partner waited in;
#  - the same at DP 2 with rank 0 stopped, and at PP 2 with stage 1 stopped (named by the
#    pipeline send that waited for it);
#  - a rank that crashes (SIGSEGV, --inject-crash-rank) dumps from its signal handler, the rank
#    the launcher then terminates dumps too, and the verdict says which crashed;
#  - without the flag nothing is written; bad input to tessera-flight is one line and exit 2.
# Every run is guarded by `timeout -s KILL 60` (a hang shows as exit 137).
# Usage: flight_recorder.sh BUILD_BIN_DIR
BIN="${1:?usage: flight_recorder.sh BUILD_BIN_DIR}/tessera-train"
FLIGHT="$1/tessera-flight"
source "$(dirname "$0")/lib.bash" flight_recorder
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--model gpt2-tiny --mock-data --lr 1e-3 --train-iters 4 --micro-batch-size 1
       --global-batch-size 4 --num-threads 1 --eval-interval 0
       --distributed-timeout-minutes 0.03 --inject-fault-iteration 2)

guarded() {  # guarded NP ARGS...: the job under the 60 s guard; output in $TMP/out
  timeout -s KILL 60 mpirun --oversubscribe -np "$1" "$BIN" "${@:2}" >"$TMP/out" 2>&1
}
dumps_of() { ls "$1"/flight_recorder.rank*.json 2>/dev/null | wc -l; }
report_has() {  # report_has DIR TEXT...: tessera-flight DIR exits 0 and prints every TEXT
  "$FLIGHT" "$1" >"$TMP/report" 2>&1 || { cat "$TMP/report" >&2; return 1; }
  local text
  for text in "${@:2}"; do
    grep -qF -- "$text" "$TMP/report" || {
      echo "  missing: $text; report:" >&2
      sed 's/^/    /' "$TMP/report" >&2
      return 1
    }
  done
}

guarded 4 "${FLAGS[@]}" --tensor-model-parallel-size 2 --flight-recorder-dir "$TMP/tp" \
  --inject-stop-rank 1
check "TP 2 x DP 2, rank 1 stopped: the watchdog ends the job (124)" [ $? -eq 124 ]
check "TP 2 x DP 2: the watchdog line points at the dumps" \
  grep -qF "Flight recorder dumps in $TMP/tp (read them with tessera-flight)." "$TMP/out"
check "TP 2 x DP 2: every rank dumped" [ "$(dumps_of "$TMP/tp")" -eq 4 ]
check "TP 2 x DP 2: the report names rank 1, the TP all-reduce and the DP collective" \
  report_has "$TMP/tp" "dumps of world ranks [0,1,2,3] of 4" \
  "verdict: world rank 1 stopped outside communication: it did not reach all_reduce #" \
  "at mappings.cc:" "on group 'tp' (world ranks [0,1])" \
  "on group 'dp-cp' (world ranks [1,3]), where world ranks [0,3] waited"

guarded 2 "${FLAGS[@]}" --flight-recorder-dir "$TMP/dp" --inject-stop-rank 0
check "DP 2, rank 0 stopped: exit 124" [ $? -eq 124 ]
check "DP 2: the report names rank 0 and the gradient all-reduce" \
  report_has "$TMP/dp" "verdict: world rank 0 stopped outside communication: it did not reach" \
  "at data_parallel_grads.cc:" "on group 'dp-cp' (world ranks [0,1]), where world ranks [1] waited"

guarded 2 "${FLAGS[@]}" --pipeline-model-parallel-size 2 --flight-recorder-dir "$TMP/pp" \
  --inject-stop-rank 1
check "PP 2, stage 1 stopped: exit 124" [ $? -eq 124 ]
check "PP 2: the report names rank 1 by the send that waited for it" \
  report_has "$TMP/pp" "point-to-point transfers not completed:" \
  "verdict: world rank 1 stopped outside communication: it did not take part in send to world rank 1" \
  "at executor.cc:"

guarded 2 "${FLAGS[@]}" --flight-recorder-dir "$TMP/crash" --inject-crash-rank 1
check "DP 2, rank 1 crashed: the job ends on the signal (139)" [ $? -eq 139 ]
check "crash: both ranks dumped" [ "$(dumps_of "$TMP/crash")" -eq 2 ]
check "crash: the report says rank 1 crashed" \
  report_has "$TMP/crash" "rank 1 (" "): signal 11" \
  "verdict: world rank 1 crashed (signal 11"

# Unset in case the caller's environment turns the recorder on for every program.
before=$(find "$TMP" "$PWD" -name 'flight_recorder*' 2>/dev/null | wc -l)
TESSERA_FLIGHT_RECORDER_DIR= guarded 2 "${FLAGS[@]}" --inject-stop-rank 1
code=$?
after=$(find "$TMP" "$PWD" -name 'flight_recorder*' 2>/dev/null | wc -l)
check "no --flight-recorder-dir: exit 124, no dump written" [ $code -eq 124 -a "$before" -eq "$after" ]

"$FLIGHT" "$TMP/missing" >"$TMP/out" 2>"$TMP/err"
check "tessera-flight: missing directory, one line, exit 2" \
  [ $? -eq 2 -a "$(wc -l <"$TMP/err")" -eq 1 ]
echo '{"format": "tessera-flight-recorder-1", "rank": 0}' >"$TMP/flight_recorder.rank0.json"
"$FLIGHT" "$TMP/flight_recorder.rank0.json" >"$TMP/out" 2>"$TMP/err"
check "tessera-flight: malformed dump, one line naming the file, exit 2" \
  [ $? -eq 2 -a "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "flight_recorder.rank0.json" "$TMP/err"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
