#!/bin/bash
# Failure behaviour of the distributed runtime, under mpirun (bin/dist_watchdog --scenario=...):
#  - a rank that never arrives at a collective (or never sends) makes the watchdog print ONE line
#    naming the operation, the group and the missing rank, and abort the job (exit 124) within
#    a 1 s timeout, instead of hanging;
#  - a rank killed by a signal takes the job down (mpirun's own handling, checked here);
#  - abort_job prints the user error once and the job exits 2, whether every rank or only one
#    detected the error.
# Every run is guarded by `timeout -s KILL 60` (a hang shows as exit 137 without our message).
# Usage: watchdog.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: watchdog.sh BUILD_BIN_DIR}/dist_watchdog"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tessera-watchdog.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
passed=0
failed=0

# expect SCENARIO NP EXIT_CODE ONCE_TEXT [MORE_TEXT...]: the job exits with EXIT_CODE, ONCE_TEXT
# appears on exactly one line of the output and every MORE_TEXT somewhere.
expect() {
  local scenario="$1" np="$2" code="$3" once="$4"
  shift 4
  timeout -s KILL 60 mpirun --oversubscribe -np "$np" "$BIN" --scenario="$scenario" \
    >"$TMP/out" 2>&1
  local rc=$? ok=1 count
  count=$(grep -cF -- "$once" "$TMP/out")
  [ "$rc" -eq "$code" ] || ok=0
  [ "$count" -eq 1 ] || ok=0
  for text in "$@"; do grep -qF -- "$text" "$TMP/out" || ok=0; done
  if [ "$ok" -eq 1 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $scenario (np $np): exit $rc (expected $code), '$once' on $count lines; output:" >&2
    sed 's/^/    /' "$TMP/out" >&2
  fi
}

[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }

expect stuck 3 124 "tessera watchdog: all_reduce #1 (fp32, 16 elements, at watchdog_test.cc:" \
  "on group 'world' (world ranks [0,1,2]) did not complete within 1 s" \
  "ranks that did not arrive: world rank 1 (started 0 collectives on this group, now idle)."
expect stuck_subgroup 4 124 "tessera watchdog: all_reduce #1" \
  "on group 'tp' (world ranks [2,3])" "ranks that did not arrive: world rank 3 ("
expect stuck_recv 2 124 "tessera watchdog: recv from rank 1" \
  "ranks that did not arrive: world rank 1 (now idle)"
expect killed 2 137 "exited on signal 9 (Killed)"
expect abort_all 2 2 "error: --widget-size 7 is not divisible by 2"
expect abort_all 4 2 "error: --widget-size 7 is not divisible by 2"
expect abort_one 2 2 "error: rank 1 cannot read data.bin"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
