# Shared by the inference tests (sourced; not a test itself): a byte-level LLaMA-style model
# trained on a small corpus of ASCII sentences, so its text is readable.
# train_text_model BIN_DIR OUT [FLAG...]: trains it into the checkpoint directory OUT (uses
# $TMP); FLAGs go to tessera-train (e.g. --max-position-embeddings for a longer context).
train_text_model() {
  local bin="$1" out="$2" i
  shift 2
  for i in $(seq 1 90); do
    echo "{\"text\": \"document $i says $((i * 7 % 13)) things about apples\"}"
  done >"$TMP/corpus.jsonl"
  "$bin/tessera-preprocess" --input "$TMP/corpus.jsonl" --output-prefix "$TMP/c" --append-eod \
    >"$TMP/prep.log" 2>&1 &&
    mpirun --oversubscribe -np 1 "$bin/tessera-train" --model llama-tiny --tokenizer-type ByteLevel \
      --data-path "$TMP/c_text_document" --data-cache-path "$TMP/cache" --split 100,0,0 \
      --train-iters 80 --micro-batch-size 4 --global-batch-size 4 --lr 1e-2 --eval-interval 0 \
      --save "$out" --save-interval 80 "$@" >"$TMP/train.log" 2>&1
}
