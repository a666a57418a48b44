#!/bin/bash
# Command-line test of tessera-preprocess. Usage: preprocess.sh BUILD_BIN_DIR
# Checks outputs and their exact sizes for .jsonl (with a malformed line) and text input, that
# --workers does not change the output, and that user errors give exit code 2 and one line on
# stderr. Exits non-zero if any check fails.
BIN="${1:?usage: preprocess.sh BUILD_BIN_DIR}/tessera-preprocess"
source "$(dirname "$0")/lib.bash" preprocess-test
size_is() { [ -f "$1" ] && [ "$(stat -c %s "$1")" -eq "$2" ]; }
lines_in() { [ "$(wc -l < "$1")" -eq "$2" ]; }
# idx size for n one-sequence documents: 34-byte header, 12 bytes per sequence, 8 per doc index.
idx_size() { echo $((34 + 12 * $1 + 8 * ($1 + 1))); }

[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable" >&2; exit 1; }

# --- .jsonl: 4 good documents, 1 malformed line (line 3), 1 blank line ------------------------
cat > "$TMP/in.jsonl" <<'JSONL'
{"text": "hello world"}
{"text": "caf\u00e9"}
{"text": broken
{"text": "a\nb"}

{"text": "", "meta": 1}
JSONL
"$BIN" --input "$TMP/in.jsonl" --output-prefix "$TMP/out" --append-eod \
  > "$TMP/stdout" 2> "$TMP/stderr"
rc=$?
check "jsonl run exits 0 (got $rc)" [ "$rc" -eq 0 ]
# Bytes: "hello world" 11, "café" 5 (é is 2 bytes), "a\nb" 3, "" 0; plus one EOD each = 23
# tokens, stored as uint16 (vocab 257 < 65500).
check "jsonl .bin is 23 uint16 tokens" size_is "$TMP/out_text_document.bin" 46
check "jsonl .idx describes 4 documents" size_is "$TMP/out_text_document.idx" "$(idx_size 4)"
check "malformed line 3 is reported" grep -q "in.jsonl:3:" "$TMP/stderr"
check "summary counts 4 documents and 1 malformed line" \
  grep -q "4 documents, 1 malformed" "$TMP/stdout"
check "no temporary files are left" [ -z "$(ls "$TMP" | grep '\.tmp$')" ]
check "idx starts with the MMIDIDX magic" \
  [ "$(head -c 7 "$TMP/out_text_document.idx")" = "MMIDIDX" ]

# --workers must not change a byte of the output.
"$BIN" --input "$TMP/in.jsonl" --output-prefix "$TMP/par" --append-eod --workers 2 \
  > /dev/null 2>&1
check "--workers 2 .bin identical" cmp -s "$TMP/out_text_document.bin" "$TMP/par_text_document.bin"
check "--workers 2 .idx identical" cmp -s "$TMP/out_text_document.idx" "$TMP/par_text_document.idx"

# Several keys: one dataset each, documents aligned (a line missing any key is skipped).
printf '%s\n' '{"text": "abc", "title": "T1"}' '{"text": "de"}' '{"text": "f", "title": "T22"}' \
  > "$TMP/keys.jsonl"
"$BIN" --input "$TMP/keys.jsonl" --output-prefix "$TMP/k" --json-keys text title \
  > /dev/null 2>&1
check "multi-key text dataset" size_is "$TMP/k_text_document.bin" 8
check "multi-key title dataset" size_is "$TMP/k_title_document.bin" 10
check "multi-key idx sizes" size_is "$TMP/k_title_document.idx" "$(idx_size 2)"

# --- plain text: documents separated by blank lines -------------------------------------------
printf 'para one\nline two\n\n\npara two\n' > "$TMP/in.txt"
"$BIN" --input "$TMP/in.txt" --output-prefix "$TMP/txt" > /dev/null 2> "$TMP/stderr"
rc=$?
check "text run exits 0 (got $rc)" [ "$rc" -eq 0 ]
# "para one\nline two" = 17 bytes, "para two" = 8 bytes: 25 tokens.
check "text .bin is 25 uint16 tokens" size_is "$TMP/txt_text_document.bin" 50
check "text .idx describes 2 documents" size_is "$TMP/txt_text_document.idx" "$(idx_size 2)"

# --- user errors: exit 2, exactly one line on stderr, no output ---------------------------------
expect_user_error() {  # expect_user_error DESCRIPTION ARGS...
  local what="$1"
  shift
  "$BIN" "$@" > "$TMP/err_stdout" 2> "$TMP/err_stderr"
  local rc=$?
  check "$what: exit code 2 (got $rc)" [ "$rc" -eq 2 ]
  check "$what: one line on stderr ($(wc -l < "$TMP/err_stderr") lines)" lines_in "$TMP/err_stderr" 1
}
expect_user_error "missing input" --input "$TMP/does-not-exist.jsonl" --output-prefix "$TMP/miss"
check "missing input names the file" grep -q "does-not-exist.jsonl" "$TMP/err_stderr"
check "missing input writes nothing" [ -z "$(ls "$TMP" | grep '^miss')" ]
expect_user_error "unknown flag" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" --bogus
expect_user_error "missing --output-prefix" --input "$TMP/in.jsonl"
expect_user_error "unknown tokenizer" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" \
  --tokenizer-type NoSuchTokenizer
expect_user_error "bad --workers" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" --workers 0
expect_user_error "unwritable output" --input "$TMP/in.jsonl" --output-prefix "$TMP/no/such/dir/x"

echo "preprocess.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
