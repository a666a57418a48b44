#!/bin/bash
# Command-line test of tessera-mesh. Usage: mesh.sh BUILD_BIN_DIR
# Checks the world 8, TP 2, PP 2 layout against Megatron-Core's published table (REFERENCE.md
# Part 1 §1), a CP/EP layout, and that sizes which do not divide give exit code 2 and exactly
# one line on stderr. Exits non-zero if any check fails.
BIN="${1:?usage: mesh.sh BUILD_BIN_DIR}/tessera-mesh"
source "$(dirname "$0")/lib.bash" mesh-test
has_line() { grep -qxF -- "$2" "$1"; }  # has_line FILE LINE: LINE is a whole line of FILE
lines_in() { [ "$(wc -l < "$1")" -eq "$2" ]; }

[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable" >&2; exit 1; }

# --- world 8, TP 2, PP 2 (DP 2): Megatron's example ----------------------------------------
"$BIN" --world-size 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  > "$TMP/out" 2> "$TMP/err"
rc=$?
check "8-rank layout exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "8-rank layout prints nothing on stderr" [ ! -s "$TMP/err" ]
check "summary line" grep -q "^world 8 = TP 2 x CP 1 x DP 2 x PP 2; experts: ETP 2 x EP 1 x EDP 2 x PP 2" "$TMP/out"
check "TP groups" has_line "$TMP/out" "tp          [0,1] [2,3] [4,5] [6,7]"
check "DP groups" has_line "$TMP/out" "dp          [0,2] [1,3] [4,6] [5,7]"
check "PP groups" has_line "$TMP/out" "pp          [0,4] [1,5] [2,6] [3,7]"
check "model-parallel groups" has_line "$TMP/out" "mp          [0,1,4,5] [2,3,6,7]"
check "gradient-reduction (dp-cp) groups" has_line "$TMP/out" "dp-cp       [0,2] [1,3] [4,6] [5,7]"
check "embedding groups = first and last stage" has_line "$TMP/out" "embd        [0,4] [1,5] [2,6] [3,7]"
# Coordinates: rank = tp + 2 * (dp + 2 * pp), so rank 6 is tp 0, dp 1, pp 1.
#                                          rank   tp   cp   dp   pp  etp   ep  edp
check "rank 6 coordinates" has_line "$TMP/out" "     6    0    0    1    1    0    0    1"
check "rank 3 coordinates" has_line "$TMP/out" "     3    1    0    1    0    1    0    1"
# summary, blank, header, 8 ranks, blank, 12 group kinds
check "8-rank output has 24 lines" lines_in "$TMP/out" 24

# --- world 8, CP 2, EP 4: context and expert groups -----------------------------------------
"$BIN" --world-size 8 --context-parallel-size 2 --expert-model-parallel-size 4 > "$TMP/out" 2>&1
rc=$?
check "CP/EP layout exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "CP groups" has_line "$TMP/out" "cp          [0,1] [2,3] [4,5] [6,7]"
check "dp-cp is the whole world" has_line "$TMP/out" "dp-cp       [0,1,2,3,4,5,6,7]"
check "EP groups" has_line "$TMP/out" "ep          [0,1,2,3] [4,5,6,7]"
check "expert-DP groups" has_line "$TMP/out" "expt-dp     [0,4] [1,5] [2,6] [3,7]"

# --- errors: exit code 2, one line on stderr, naming the flags and numbers ------------------
expect_error() {  # expect_error DESCRIPTION EXPECTED_TEXT ARGS...
  local what="$1" text="$2"
  shift 2
  "$BIN" "$@" > "$TMP/out" 2> "$TMP/err"
  local rc=$?
  check "$what: exit code 2 (got $rc)" [ "$rc" -eq 2 ]
  check "$what: one line on stderr" lines_in "$TMP/err" 1
  check "$what: nothing on stdout" [ ! -s "$TMP/out" ]
  check "$what: message names the problem" grep -qF -- "$text" "$TMP/err"
}
expect_error "world 6 TP 2 PP 2" \
  "world size 6 is not divisible by TP*CP*PP = 4 (--tensor-model-parallel-size 2 x --context-parallel-size 1 x --pipeline-model-parallel-size 2)" \
  --world-size 6 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
expect_error "EP 3 with DP*CP 8" "--expert-model-parallel-size 3 does not divide DP*CP = 8" \
  --world-size 8 --expert-model-parallel-size 3
expect_error "TP 0" "--tensor-model-parallel-size must be >= 1, got 0" \
  --world-size 8 --tensor-model-parallel-size 0
expect_error "missing --world-size" "--world-size" --tensor-model-parallel-size 2
expect_error "non-numeric size" "--pipeline-model-parallel-size" \
  --world-size 8 --pipeline-model-parallel-size two

echo "mesh.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
