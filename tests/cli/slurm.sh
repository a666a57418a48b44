#!/bin/bash
# Runs under SLURM (scripts/multihost.sh --slurm: slurmctld and one slurmd per network-namespace
# host, munge, PMIx), against the same layout under mpirun on one host:
#   - srun --mpi=pmix, 2 hosts x 2 tasks, TP 2 x DP 2, bf16, 20 iterations: losses and gradient
#     norms equal (zero tolerances) and the exported weights byte for byte equal;
#   - the example batch script (examples/multihost/sbatch_gpt.sh, its arguments file replaced by
#     this run's) submitted with sbatch --wait: the same equality;
#   - under srun the ranks know their hosts (--print-mesh) and the threads per rank follow the
#     tasks per host;
#   - bad input under srun: one error line and exit code 2 from srun;
#   - no namespace of the cluster remains after it, nor its daemons.
# Without network namespaces or without SLURM installed the script exits 77 (ctest: skipped).
# Usage: slurm.sh BUILD_BIN_DIR
BIN_DIR="$(cd "${1:?usage: slurm.sh BUILD_BIN_DIR}" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$(dirname "$0")/lib.bash" slurm
source "$(dirname "$0")/multihost_lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MULTIHOST="$ROOT/scripts/multihost.sh"
bash "$MULTIHOST" --slurm --hosts 1 --slots 1 -- true 2>"$TMP/probe"
case $? in
  0) ;;
  77) echo "skipped: $(cat "$TMP/probe")"; exit 77 ;;
  *) echo "FAIL: the SLURM test bed did not start:" >&2; cat "$TMP/probe" >&2; exit 1 ;;
esac

# "${CLUSTER[@]}" COMMAND...: COMMAND in the hub of a fresh 2-host cluster of 2 CPUs a host.
CLUSTER=(bash "$MULTIHOST" --slurm --hosts 2 --slots 2 --)
SRUN=(srun --nodes 2 --ntasks-per-node 2 --mpi=pmix --kill-on-bad-exit=1)

outputs one-host
logged one-host mpirun --oversubscribe -np 4 "$BIN_DIR/tessera-train" "${FLAGS[@]}" "${PIN[@]}" \
  "${TP_DP[@]}" "${OUTPUTS[@]}"
outputs srun
logged srun "${CLUSTER[@]}" "${SRUN[@]}" "$BIN_DIR/tessera-train" "${FLAGS[@]}" "${PIN[@]}" "${TP_DP[@]}" \
  "${OUTPUTS[@]}"
check "srun --mpi=pmix, 2 hosts x 2 tasks, TP 2 x DP 2: bitwise equal to mpirun on one host" \
  bitwise one-host srun

# The example batch script as a user submits it, from a directory holding it and the arguments
# file it sources; the nodes here have 2 CPUs, so 2 tasks of 1 CPU a node (sbatch's options
# override the script's #SBATCH lines). Its --num-threads is then 1, as the reference's.
mkdir -p "$TMP/submit"
cp "$ROOT/examples/multihost/sbatch_gpt.sh" "$TMP/submit/"
outputs sbatch
declare -p FLAGS PIN TP_DP OUTPUTS >"$TMP/submit/gpt2_350m_args.sh"
echo 'GPT_ARGS=("${FLAGS[@]}" "${TP_DP[@]}" "${OUTPUTS[@]}")' >>"$TMP/submit/gpt2_350m_args.sh"
submit() {
  (cd "$TMP/submit" && PATH="$BIN_DIR:$PATH" logged sbatch "${CLUSTER[@]}" sbatch --wait --quiet \
    --nodes 2 --ntasks-per-node 2 --cpus-per-task 1 --output "$TMP/sbatch/job.out" sbatch_gpt.sh) ||
    { cat "$TMP/sbatch/err" "$TMP/sbatch/job.out" >&2; false; }
}
check "sbatch --wait examples/multihost/sbatch_gpt.sh: the job succeeds" submit
check "... and is bitwise equal to mpirun on one host" bitwise one-host sbatch

mesh() {
  timeout 300 "${CLUSTER[@]}" "${SRUN[@]}" "$BIN_DIR/tessera-train" "${FLAGS[@]}" "${TP_DP[@]}" \
    --print-mesh >"$TMP/mesh" 2>&1 &&
    grep -q "^hosts: host0 \[0,1\], host1 \[2,3\]$" "$TMP/mesh" || { cat "$TMP/mesh" >&2; false; }
}
check "under srun --print-mesh names the hosts" mesh
# Threads by default (no --num-threads; tasks not bound, so each sees every core): this
# machine's cores over the tasks of the task's host.
cores=$(nproc)
half=$((cores / 2 > 0 ? cores / 2 : 1))
logged threads "${CLUSTER[@]}" "${SRUN[@]}" --cpu-bind=none "$BIN_DIR/tessera-train" "${FLAGS[@]}" \
  "${TP_DP[@]}" --train-iters 1
check "under srun, 2 tasks a host: $half threads each" \
  grep -q "compute bf16, $half threads" "$TMP/threads/out"

bad_input() {
  timeout 300 "${CLUSTER[@]}" "${SRUN[@]}" "$BIN_DIR/tessera-train" "${FLAGS[@]}" \
    --tensor-model-parallel-size 3 \
    >"$TMP/bad.out" 2>"$TMP/bad.err"
  local code=$?
  [ "$code" -eq 2 ] && [ "$(grep -c "^error: " "$TMP/bad.err")" -eq 1 ] ||
    { echo "  exit $code" >&2; cat "$TMP/bad.err" >&2; false; }
}
check "bad input under srun: one error line, srun exits 2" bad_input

# Teardown: the cluster's namespaces (listed from inside) and its daemons (munged, slurmctld,
# the slurmds, by their pid files) are gone after it.
teardown() {
  timeout 300 "${CLUSTER[@]}" sh -c 'ip netns list | awk "{print \$1}" | grep "^$TESSERA_MULTIHOST_PREFIX";
    dir=$(dirname "$SLURM_CONF"); echo "daemons" $(cat "$dir/../munge/munged.pid" "$dir"/*.pid)' \
    >"$TMP/listed" 2>/dev/null
  grep -v "^daemons " "$TMP/listed" | sort -u >"$TMP/made"
  local pids pid
  pids=$(awk '/^daemons /{$1 = ""; print}' "$TMP/listed")
  [ "$(wc -l <"$TMP/made")" -eq 3 ] && no_namespace_left && [ "$(wc -w <<<"$pids")" -eq 4 ] || return 1
  # A zombie is gone too (a container's init may not reap the daemons it inherited).
  for pid in $pids; do ! ps -o stat= -p "$pid" | grep -qv "^Z" || return 1; done
}
check "no namespace nor daemon of the cluster remains after it" teardown

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
