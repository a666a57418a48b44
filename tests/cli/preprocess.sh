#!/bin/bash
# Command-line test of tessera-preprocess. Usage: preprocess.sh BUILD_BIN_DIR
# Checks outputs and their exact sizes for .jsonl (with a malformed line) and text input, that
# --workers does not change the output, --split-sentences' hand-worked sentence boundaries (read
# back from the .idx), --partitions 3 and 7 byte-identical to 1, progress lines every
# --log-interval documents, NullTokenizer, Megatron's no-effect flags, and that user errors give
# exit code 2 and one line on stderr. Exits non-zero if any check fails.
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

# --- --split-sentences: hand-worked sentence boundaries read back from the .idx ------------------
# idx_field FILE OFFSET TYPE COUNT: COUNT values of TYPE (d4, d8) at byte OFFSET, one line.
idx_field() { od -A n -t "$3" -j "$2" -N $(( ${3#d} * $4 )) "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# idx_layout PREFIX: "sequences | lengths | document_indices" of PREFIX.idx.
idx_layout() {
  local f="$1.idx" n d
  n=$(idx_field "$f" 18 d8 1); d=$(idx_field "$f" 26 d8 1)
  echo "$n | $(idx_field "$f" 34 d4 "$n") | $(idx_field "$f" $((34 + 12 * n)) d8 "$d")"
}
cat > "$TMP/ss.jsonl" <<'JSONL'
{"text": "Mr. Smith came. He left! Did he? Yes."}
{"text": "One. two. Three.\n\nFour"}
{"text": ""}
JSONL
# ByteLevel: a token per byte. Rules of data/sentence_splitter.h: "Mr." is an abbreviation,
# "One. two." does not split (lowercase next). Sentences (bytes): "Mr. Smith came." 15, "He
# left!" 8, "Did he?" 7, "Yes." 4 (+1 EOD); "One. two." 9, "Three." 6, "Four" 4 (+1 EOD); the
# empty document has no sentence and no EOD (Megatron's rule). Document indices 0 4 7 7.
"$BIN" --input "$TMP/ss.jsonl" --output-prefix "$TMP/ss" --split-sentences --append-eod \
  > "$TMP/stdout" 2>&1
check "sentence-level output is named _sentence" [ -f "$TMP/ss_text_sentence.idx" ]
check "sentence lengths and document boundaries ($(idx_layout "$TMP/ss_text_sentence"))" \
  [ "$(idx_layout "$TMP/ss_text_sentence")" = "7 | 15 8 7 5 9 6 5 | 0 4 7 7" ]
check "sentence .bin is 55 uint16 tokens" size_is "$TMP/ss_text_sentence.bin" 110
# --keep-newlines: the whitespace after a sentence stays with it: "Mr. Smith came. " 16,
# "He left! " 9, "Did he? " 8, "Yes." 4+1; "One. two. " 10, "Three.\n\n" 8, "Four" 4+1.
"$BIN" --input "$TMP/ss.jsonl" --output-prefix "$TMP/nl" --split-sentences --keep-newlines \
  --append-eod > /dev/null 2>&1
check "--keep-newlines sentence lengths ($(idx_layout "$TMP/nl_text_sentence"))" \
  [ "$(idx_layout "$TMP/nl_text_sentence")" = "7 | 16 9 8 5 10 8 5 | 0 4 7 7" ]
check "without --split-sentences: one sequence per document" \
  [ "$(idx_layout "$TMP/out_text_document")" = "4 | 12 6 4 1 | 0 1 2 3 4" ]

# --- --partitions: byte-identical to one partition ----------------------------------------------
awk 'BEGIN { srand(7); for (i = 1; i <= 90; ++i) {
       if (i == 40) { print "{\"text\": broken"; continue }
       s = ""; n = int(rand() * 12) + 1
       for (j = 0; j < n; ++j) s = s sprintf("Word%d is here. ", int(rand() * 1000))
       printf "{\"text\": \"%s\", \"title\": \"T%d\"}\n", s, i } }' > "$TMP/many.jsonl"
for opts in "" "--split-sentences"; do
  "$BIN" --input "$TMP/many.jsonl" --output-prefix "$TMP/p1" --json-keys text title \
    --append-eod $opts > /dev/null 2>&1
  "$BIN" --input "$TMP/many.jsonl" --output-prefix "$TMP/p3" --json-keys text title \
    --append-eod --partitions 3 --workers 2 $opts > "$TMP/p3.out" 2> "$TMP/p3.err"
  level=document; [ -n "$opts" ] && level=sentence
  for key in text title; do
    for ext in bin idx; do
      check "--partitions 3 ${opts:-(documents)}: ${key} .$ext identical to 1 partition" \
        cmp -s "$TMP/p1_${key}_$level.$ext" "$TMP/p3_${key}_$level.$ext"
    done
  done
  check "--partitions 3 ${opts}: partition files removed" [ -z "$(ls "$TMP" | grep '^p3_[0-9]')" ]
  check "--partitions 3 ${opts}: the malformed line 40 is reported" grep -q "many.jsonl:40:" "$TMP/p3.err"
done
# Text input (documents across cut points) and a directory of two files.
awk 'BEGIN { for (i = 1; i <= 40; ++i) { print "Doc " i " line one."; if (i % 3) print "Second line."; print "" } }' \
  > "$TMP/many.txt"
mkdir -p "$TMP/tdir"
head -n 50 "$TMP/many.txt" > "$TMP/tdir/a.txt"
tail -n +51 "$TMP/many.txt" > "$TMP/tdir/b.txt"
"$BIN" --input "$TMP/many.txt" --output-prefix "$TMP/t1" > /dev/null 2>&1
for n in 3 7; do
  "$BIN" --input "$TMP/tdir" --output-prefix "$TMP/t$n" --partitions "$n" > /dev/null 2>&1
  check "text directory, --partitions $n: .bin identical" cmp -s "$TMP/t1_text_document.bin" "$TMP/t${n}_text_document.bin"
  check "text directory, --partitions $n: .idx identical" cmp -s "$TMP/t1_text_document.idx" "$TMP/t${n}_text_document.idx"
done

# --- progress: a line every --log-interval documents, then a summary ----------------------------
"$BIN" --input "$TMP/ss.jsonl" --output-prefix "$TMP/lg" --log-interval 1 > /dev/null 2> "$TMP/log.err"
check "--log-interval 1: a progress line per document ($(grep -c 'ETA' "$TMP/log.err"))" \
  [ "$(grep -c ' documents, .* MB (.*%), .* MB/s, ETA ' "$TMP/log.err")" -eq 3 ]
check "progress counts documents" grep -q ": 2 documents, " "$TMP/log.err"
check "progress ends with a summary line" grep -q "done: 3 documents" "$TMP/log.err"
"$BIN" --input "$TMP/many.jsonl" --output-prefix "$TMP/lg" --log-interval 20 > /dev/null 2> "$TMP/log.err"
check "--log-interval 20 over 89 documents: 4 lines" [ "$(grep -c 'ETA' "$TMP/log.err")" -eq 4 ]

# --- NullTokenizer: the text is the ids ---------------------------------------------------------
printf '{"text": "1 2 3"}\n{"text": "9"}\n' > "$TMP/ids.jsonl"
"$BIN" --input "$TMP/ids.jsonl" --output-prefix "$TMP/null" --tokenizer-type NullTokenizer \
  --vocab-size 10 --append-eod > /dev/null 2>&1
check "NullTokenizer: ids as written, EOD = --vocab-size" \
  [ "$(od -A n -t u2 "$TMP/null_text_document.bin" | tr -s ' \n' ' ')" = " 1 2 3 10 9 10 " ]

# --- Megatron flags that change nothing here: accepted, with a note ------------------------------
"$BIN" --input "$TMP/ss.jsonl" --output-prefix "$TMP/mf" --dataset-impl mmap --lang english \
  --keep-sequential-samples --legacy-tokenizer --vocab-extra-ids 0 > /dev/null 2> "$TMP/mf.err"
check "no-effect Megatron flags: exit 0" [ -f "$TMP/mf_text_document.idx" ]
check "no-effect flags are noted (3 lines)" [ "$(grep -c 'has no effect' "$TMP/mf.err")" -eq 3 ]

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
expect_user_error "--dataset-impl lazy" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" \
  --dataset-impl lazy
expect_user_error "--find-optimal-num-workers" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" \
  --find-optimal-num-workers
expect_user_error "--vocab-extra-ids 2" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" \
  --vocab-extra-ids 2
expect_user_error "--vocab-size with a file tokenizer" --input "$TMP/in.jsonl" \
  --output-prefix "$TMP/x" --vocab-size 300
expect_user_error "NullTokenizer without --vocab-size" --input "$TMP/in.jsonl" \
  --output-prefix "$TMP/x" --tokenizer-type NullTokenizer
expect_user_error "--partitions 0" --input "$TMP/in.jsonl" --output-prefix "$TMP/x" --partitions 0

echo "preprocess.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
