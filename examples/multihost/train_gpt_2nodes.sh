#!/bin/bash
# GPT-2 350M on two machines of 8 cores with mpirun and the hostfile beside this script: 4 ranks
# a machine, 2 threads each (cores / ranks on the machine); the arguments in gpt2_350m_args.sh.
# What must be identical on every machine: the tessera-train binary at the same path (or a shared
# installation), the data at the same path (a shared file system or a copy per machine), and for
# --save a directory every machine shares (tessera-train refuses a directory that is not shared
# before training starts: docs/distributed.md, "Running on several machines").
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/gpt2_350m_args.sh"
mpirun --hostfile "$HERE/hostfile" -np 8 --map-by slot --bind-to none \
  --mca btl tcp,self,vader --mca btl_tcp_if_include 10.0.0.0/8 \
  tessera-train "${GPT_ARGS[@]}"
