#!/bin/bash
# GPT-2 350M on two machines of 8 cores with mpirun and the hostfile beside this script:
# TP 2 inside each machine (4 ranks a machine, 2 threads each), DP 4 across (DP groups cross
# machines, which their once-a-step traffic can afford), ZeRO 1, bf16.
# What must be identical on every machine: the tessera-train binary at the same path (or
# --prefix / a shared installation), the data at the same path (a shared file system or a copy
# per machine), and for --save a directory every machine shares (tessera-train refuses a
# directory that is not shared before training starts: docs/distributed.md).
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="${DATA:-/shared/data/my-corpus_text_document}"
CKPT="${CKPT:-/shared/checkpoints/gpt2-350m}"
mpirun --hostfile "$HERE/hostfile" -np 8 --map-by slot --bind-to none \
  --mca btl tcp,self,vader --mca btl_tcp_if_include 10.0.0.0/8 \
  -x OMP_PROC_BIND=false \
  tessera-train --model gpt2-350m --data-path "$DATA" --tokenizer-type GPT2BPETokenizer \
    --vocab-file /shared/data/gpt2-vocab.json --merge-file /shared/data/gpt2-merges.txt \
    --tensor-model-parallel-size 2 --sequence-parallel --zero-stage 1 --bf16 \
    --micro-batch-size 4 --global-batch-size 64 --seq-length 1024 \
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 200 --train-iters 20000 \
    --save "$CKPT" --save-interval 1000 --load "$CKPT" --log-interval 10
