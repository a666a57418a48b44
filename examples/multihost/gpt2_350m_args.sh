# The training arguments both launch examples use (sourced by train_gpt_2nodes.sh and
# sbatch_gpt.sh): GPT-2 350M, TP 2 inside each machine (4 ranks a machine), DP across machines
# (DP groups cross machines, which their once-a-step traffic can afford), ZeRO 1, bf16.
DATA="${DATA:-/shared/data/my-corpus_text_document}"
CKPT="${CKPT:-/shared/checkpoints/gpt2-350m}"
GPT_ARGS=(--model gpt2-350m --data-path "$DATA" --tokenizer-type GPT2BPETokenizer
          --vocab-file /shared/data/gpt2-vocab.json --merge-file /shared/data/gpt2-merges.txt
          --tensor-model-parallel-size 2 --sequence-parallel --zero-stage 1 --bf16
          --micro-batch-size 4 --global-batch-size 64 --seq-length 1024
          --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 200 --train-iters 20000
          --save "$CKPT" --save-interval 1000 --load "$CKPT" --log-interval 10)
