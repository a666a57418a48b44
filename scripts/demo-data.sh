#!/usr/bin/env bash
# The demo's data (scripts/demo.sh, bench/moe.sh): the `fortunes` package's English text as one
# document per entry, a 4096-token byte-level BPE tokenizer trained on it, and the Megatron
# indexed dataset, in demo-run/ (kept between runs). Needs build/bin/tessera-preprocess.
# Usage: scripts/demo-data.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=demo-run
mkdir -p "$out"
vocab=4096
if [ ! -f "$out/fortunes_text_document.idx" ] || [ ! -f "$out/tokenizer.json" ]; then
  # Fortune files hold entries separated by lines of "%": each entry becomes one document
  # (documents are separated by blank lines in the text input format). The ASCII-art files are
  # left out: they are not English.
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
       ! -name 'art' ! -name 'ascii-art' -print0 | sort -z | xargs -0 cat \
    | sed -e 's/^%$//' | cat -s > "$out/fortunes.txt"
  ./build/bin/tessera-preprocess --input "$out/fortunes.txt" --input-format text \
    --output-prefix "$out/fortunes" --train-tokenizer --vocab-size "$vocab" --append-eod \
    --workers 2
fi

