#!/bin/bash
# The same run under SLURM: 2 nodes, 4 tasks a node, 2 cores a task. srun starts the ranks
# (PMIx); Open MPI takes the rank, size and local size from it, and Tessera its threads per rank
# from the tasks per node (SLURM_NTASKS_PER_NODE). Submit with: sbatch sbatch_gpt.sh
#SBATCH --job-name=tessera-gpt2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
set -eu
DATA="${DATA:-/shared/data/my-corpus_text_document}"
CKPT="${CKPT:-/shared/checkpoints/gpt2-350m}"
# End the job when one task fails, as mpirun does.
srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores \
  tessera-train --model gpt2-350m --data-path "$DATA" --tokenizer-type GPT2BPETokenizer \
    --vocab-file /shared/data/gpt2-vocab.json --merge-file /shared/data/gpt2-merges.txt \
    --tensor-model-parallel-size 2 --sequence-parallel --zero-stage 1 --bf16 \
    --micro-batch-size 4 --global-batch-size 64 --seq-length 1024 \
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 200 --train-iters 20000 \
    --save "$CKPT" --save-interval 1000 --load "$CKPT" --log-interval 10
