#!/bin/bash
# A multi-host test bed on one machine: network namespaces as hosts, mpirun across them over TCP.
#
#   scripts/multihost.sh [--hosts N] [--slots S] [--rate RATE] [--latency LAT]
#                        [--mpirun-args "ARGS"] -- PROGRAM [ARGS...]
#
# Makes a namespace "hub" holding a bridge (10.77.0.1/24) and N host namespaces, each with its
# own veth address on that bridge (10.77.0.11, .12, ...) and, for every process started in it,
# its own hostname (host0, host1, ...: a UTS namespace of its own, so Open MPI sees N machines and
# never shares memory between them). Then runs, inside the hub,
#   mpirun -np N*S --hostfile (hostI slots=S) --mca plm_rsh_agent AGENT ... PROGRAM ARGS
# where AGENT starts Open MPI's daemon of host I inside its namespace (Open MPI's ssh stand-in).
# Ranks fill host0 first (S per host). TCP between hosts is restricted to the bridge's subnet;
# the root namespace's network is not touched. Ranks are not bound to cores: each host's daemon
# would bind its first rank to core 0, all hosts to the same core of the one machine they share.
#   --rate RATE, --latency LAT   shape each host's link with tc's token bucket filter (e.g.
#                                --rate 1gbit: both directions, host to hub and hub to host;
#                                a 2 MB bucket; LAT is tbf's queueing bound, default 50ms)
#   --mpirun-args "ARGS"         more mpirun arguments (e.g. "-x TESSERA_CPU_TARGET")
#   --private-dir DIR            DIR is not shared between hosts: each host's processes see an
#                                empty tmpfs of their own there (a mount namespace per host), as
#                                a local disk of the same path on every machine would be
#   --slurm                      a SLURM cluster instead of mpirun: slurmctld in the hub (host
#                                name "hub"), one slurmd per host namespace (nodes host0 ...,
#                                SLOTS CPUs each, partition "debug"), munge with a key of this
#                                run; then PROGRAM runs in the hub with SLURM_CONF set, so it is
#                                an `srun ...` or `sbatch --wait ...` command line. Without SLURM
#                                installed (slurmctld, slurmd, srun, munged) this prints one line
#                                and exits 77.
# Everything is removed on exit, after a failure or an interrupt too (processes left in the
# namespaces are killed first). Needs root with CAP_SYS_ADMIN: without it this prints one line
# and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE 77).
# The program sees TESSERA_MULTIHOST_PREFIX, the prefix of this run's namespace names.
# Exit status: PROGRAM's (mpirun's), 77 when the privilege to make namespaces is missing, 2 for
# bad usage or another failure to set up.
set -u
HOSTS=2
SLOTS=2
RATE=""
LATENCY=50ms
# The bucket of tc's token bucket filter: at least the bytes the rate brings in one timer tick,
# or the filter delivers well below the rate (measured: a 32 KiB bucket gave a third of 1 Gbit/s).
BURST=2mb
MPIRUN_ARGS=""
PRIVATE_DIR=""
SLURM=0
usage() { echo "multihost.sh: $1 (see the header of $0)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) HOSTS="${2:-}"; shift 2 ;;
    --slots) SLOTS="${2:-}"; shift 2 ;;
    --rate) RATE="${2:-}"; shift 2 ;;
    --latency) LATENCY="${2:-}"; shift 2 ;;
    --mpirun-args) MPIRUN_ARGS="${2:-}"; shift 2 ;;
    --private-dir) PRIVATE_DIR="${2:-}"; shift 2 ;;
    --slurm) SLURM=1; shift ;;
    --) shift; break ;;
    *) usage "unknown option '$1'" ;;
  esac
done
[ $# -gt 0 ] || usage "a program to run after -- is required"
[[ "$HOSTS" =~ ^[1-9][0-9]?$ ]] && [ "$HOSTS" -le 64 ] || usage "--hosts must be 1..64, got '$HOSTS'"
[[ "$SLOTS" =~ ^[1-9][0-9]*$ ]] || usage "--slots must be a positive integer, got '$SLOTS'"
if [ "$SLURM" -eq 1 ]; then
  [ -z "$MPIRUN_ARGS" ] || usage "--mpirun-args applies to mpirun, not to --slurm (pass srun's options in PROGRAM)"
  for tool in slurmctld slurmd srun sinfo munged; do
    command -v "$tool" >/dev/null 2>&1 || {
      echo "multihost.sh: --slurm needs SLURM and munge installed ($tool not found; Debian: slurmctld slurmd slurm-client)" >&2
      exit 77
    }
  done
fi

# Names unique to this run (namespaces are global to the machine; concurrent runs must not meet).
PREFIX="tsr$$"
HUB="${PREFIX}hub"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tessera-multihost.XXXXXX")"
made=()
cleanup() {
  local ns pids
  # munged (--slurm) runs in the root namespace: --stop waits until it is gone.
  [ -f "$WORK/munge/munged.pid" ] &&
    { munged --stop --socket="$WORK/munge/socket" >/dev/null 2>&1 ||
      kill -9 "$(cat "$WORK/munge/munged.pid")" 2>/dev/null; }
  disown -a 2>/dev/null  # mpirun is a background job: no "Killed" line when it is killed below
  for ns in "${made[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! err=$(ip netns add "$HUB" 2>&1); then
  # Only a refusal of the privilege is a skip; any other failure is a failure.
  case "$err" in
    *"Operation not permitted"* | *"Permission denied"*)
      echo "multihost.sh: cannot create network namespaces here (needs root with CAP_SYS_ADMIN): $err" >&2
      exit 77 ;;
  esac
  echo "multihost.sh: cannot create namespace $HUB: $err" >&2
  exit 2
fi
made+=("$HUB")
fail() { echo "multihost.sh: $1" >&2; exit 2; }
ip -n "$HUB" link set lo up || fail "cannot bring up the hub's loopback"
ip -n "$HUB" link add br0 type bridge || fail "cannot create the bridge"
ip -n "$HUB" addr add 10.77.0.1/24 dev br0 && ip -n "$HUB" link set br0 up ||
  fail "cannot configure the bridge"

shape() {  # shape NAMESPACE DEVICE: the token bucket filter on DEVICE's egress
  [ -z "$RATE" ] && return 0
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst "$BURST" latency "$LATENCY" ||
    fail "tc could not shape $2 in $1 to $RATE (is the rate valid, e.g. 1gbit?)"
}

: > "$WORK/hostfile"
for ((i = 0; i < HOSTS; i++)); do
  ns="${PREFIX}h$i"
  ip netns add "$ns" || fail "cannot create namespace $ns"
  made+=("$ns")
  ip -n "$ns" link set lo up
  # Both ends made inside their namespaces: nothing appears in the root namespace.
  ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "$HUB" ||
    fail "cannot create the veth pair of host$i"
  ip -n "$HUB" link set "p$i" master br0 && ip -n "$HUB" link set "p$i" up
  ip -n "$ns" addr add "10.77.0.$((11 + i))/24" dev eth0 && ip -n "$ns" link set eth0 up ||
    fail "cannot configure host$i's address"
  shape "$ns" eth0
  shape "$HUB" "p$i"
  echo "host$i slots=$SLOTS" >> "$WORK/hostfile"
done

# The launch agent: mpirun calls it as `AGENT HOST COMMAND...` to start its daemon on HOST.
if [ -n "$PRIVATE_DIR" ]; then
  mkdir -p "$PRIVATE_DIR" || fail "cannot create --private-dir $PRIVATE_DIR"
  PRIVATE_DIR="$(cd "$PRIVATE_DIR" && pwd)"
fi
cat > "$WORK/agent" <<EOF
#!/bin/bash
host="\$1"; shift
ns="${PREFIX}h\${host#host}"
private='$PRIVATE_DIR'
if [ -n "\$private" ]; then
  exec ip netns exec "\$ns" unshare --uts --mount sh -c \\
    "mount -t tmpfs tessera-private '\$private' && hostname \$host && \$*"
fi
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host && \$*"
EOF
chmod +x "$WORK/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The prefix of this run's namespaces, for a program that wants to find them (tests).
export TESSERA_MULTIHOST_PREFIX="$PREFIX"

if [ "$SLURM" -eq 1 ]; then
  # shellcheck source=scripts/multihost_slurm.bash
  source "$(dirname "$0")/multihost_slurm.bash"
  start_slurm
  ip netns exec "$HUB" env SLURM_CONF="$WORK/slurm/slurm.conf" "$@"
  exit
fi
# In the background and waited for: bash runs a trap only once its foreground command has ended,
# so a TERM sent to this script alone during a hung run would otherwise leave the namespaces and
# the processes in them; `wait` returns at the signal and the EXIT trap kills and removes them.
# (`<&0`: a background job's stdin would otherwise be /dev/null; mpirun forwards it to rank 0.)
# shellcheck disable=SC2086  # MPIRUN_ARGS is a list of arguments
ip netns exec "$HUB" mpirun -np $((HOSTS * SLOTS)) --hostfile "$WORK/hostfile" \
  --mca plm_rsh_agent "$WORK/agent" --mca plm_rsh_no_tree_spawn 1 --bind-to none \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
  $MPIRUN_ARGS "$@" <&0 &
wait $!
