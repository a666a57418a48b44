#!/usr/bin/env bash
# Tokenizer speed on English text (the `fortunes` package, as in the demo): bench/tokenizer_main
# (MB/s per thread for GPT-2 BPE and tokenizer.json, pre-tokeniser, BPE training), then
# tessera-preprocess with GPT-2 BPE at --workers 1 and 2 and their ratio.
# Usage: bench/tokenizer.sh [BUILD_DIR]   (default build; builds the three targets it needs)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
cmake --build "$build" -j2 --target tokenizer tessera-preprocess >/dev/null
gpt2="$(bash scripts/fetch_gpt2_vocab.sh)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/tessera-tokenizer-bench.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
     ! -name 'art' ! -name 'ascii-art' -print0 | sort -z | xargs -0 cat \
  | sed -e 's/^%$//' | cat -s > "$tmp/one.txt"
"$build/bin/tokenizer" "$gpt2/encoder.json" "$gpt2/vocab.bpe" "$tmp/one.txt"

# Eight copies (~20 MB) so that each run lasts long enough to time.
for i in 1 2 3 4 5 6 7 8; do cat "$tmp/one.txt"; echo; done > "$tmp/corpus.txt"
run() {  # prints the wall-clock and the user CPU seconds of one run (bash's own `time`)
  local TIMEFORMAT='%R %U'
  { time "$build/bin/tessera-preprocess" --input "$tmp/corpus.txt" --input-format text \
      --output-prefix "$tmp/w$1" --tokenizer-type GPT2BPETokenizer \
      --vocab-file "$gpt2/encoder.json" --merge-file "$gpt2/vocab.bpe" --append-eod \
      --workers "$1" > "$tmp/w$1.log"; } 2>&1
}
read -r t1 u1 <<< "$(run 1)"
read -r t2 u2 <<< "$(run 2)"
cmp -s "$tmp/w1_text_document.bin" "$tmp/w2_text_document.bin" || { echo "outputs differ" >&2; exit 1; }
mb=$(stat -c %s "$tmp/corpus.txt")
# On a machine shared with other work the wall-clock ratio understates the speed-up; the CPU
# seconds show whether two workers do more work than one.
awk -v t1="$t1" -v t2="$t2" -v u1="$u1" -v u2="$u2" -v b="$mb" -v cores="$(nproc)" \
    -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
  printf "tessera-preprocess GPT-2 BPE on %.1f MB: --workers 1 %.2f s (%.1f MB/s, %.2f CPU s), --workers 2 %.2f s (%.1f MB/s, %.2f CPU s): workers-2/workers-1 speed-up %.2fx (ideal 2x; load average %s on %d cores)\n",
    b / 1e6, t1, b / 1e6 / t1, u1, t2, b / 1e6 / t2, u2, t1 / t2, load, cores }'
