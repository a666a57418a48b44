#!/bin/bash
# Runs across "hosts" (network namespaces, scripts/multihost.sh: each its own hostname and
# address, TCP between them) against the same layout on one host:
#   - 2 hosts x 1 rank, DP 2 (ZeRO 0, 1 and 3; ZeRO 0 and 1 with the gradients reduced in bf16),
#     26 MB of gradients, the pair exchange's chunks;
#   - 2 hosts x 2 ranks, TP 2 x DP 2, and 4 hosts x 2 ranks, TP 2 x PP 2 x DP 2 with ZeRO 1, bf16,
#     20 iterations: losses and gradient norms of every iteration equal (tessera-compare with
#     zero tolerances) and the exported weights byte for byte equal (cmp) to mpirun -np 4 / -np 8
#     on one host;
#   - --print-mesh names each rank's host; a tensor-parallel group across hosts (2 hosts x 1 rank,
#     TP 2) gets one warning naming the group, and a layout whose groups stay inside hosts none;
#   - threads per rank default from the ranks on the rank's host (cores / ranks there);
#   - the example layouts (examples/multihost) and others keep TP inside hosts (--print-mesh);
#   - a checkpoint saved across hosts into a shared directory loads on one host; --save into a
#     directory each host has privately (--private-dir) is refused with one line, exit 2;
#   - between hosts the pair exchanges use a TCP connection of their own (TESSERA_PAIR_SOCKET=verbose
#     names it); with TESSERA_PAIR_SOCKET=0, or no route to the address host1 offers, MPI's
#     transport, one warning line with the reason, the same bits;
#   - no namespace a run made (its hub and two hosts) remains after it, nor after a run stopped
#     by a signal (timeout) while its program still ran.
# Without network namespaces (no root, or no CAP_SYS_ADMIN) the script exits 77: ctest reports it
# skipped, not passed.
# Usage: multihost.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: multihost.sh BUILD_BIN_DIR}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$(dirname "$0")/lib.bash" multihost
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$(dirname "$0")/multihost_lib.bash"
MULTIHOST="$ROOT/scripts/multihost.sh"
bash "$MULTIHOST" --hosts 1 --slots 1 -- true 2>"$TMP/probe"
case $? in
  0) ;;
  77) echo "skipped: $(cat "$TMP/probe")"; exit 77 ;;
  *) echo "FAIL: the test bed did not start:" >&2; cat "$TMP/probe" >&2; exit 1 ;;
esac

CORES=$(nproc)

# train NAME HOSTS SLOTS FLAGS...: a run across HOSTS namespaces of SLOTS ranks, or (HOSTS 0) one
# mpirun of SLOTS ranks on this host; metrics and weights in $TMP/NAME.
train() {
  local name="$1" hosts="$2" slots="$3"
  shift 3
  outputs "$name"
  if [ "$hosts" -eq 0 ]; then
    logged "$name" mpirun --oversubscribe -np "$slots" "$BIN_DIR/tessera-train" "$@" "${OUTPUTS[@]}"
  else
    logged "$name" bash "$MULTIHOST" --hosts "$hosts" --slots "$slots" -- \
      "$BIN_DIR/tessera-train" "$@" "${OUTPUTS[@]}"
  fi
}

no_warning() { ! grep -q "^warning: .*spans hosts" "$1"; }

train one-host-tp-dp 0 4 "${FLAGS[@]}" "${PIN[@]}" "${TP_DP[@]}"
train two-hosts-tp-dp 2 2 "${FLAGS[@]}" "${PIN[@]}" "${TP_DP[@]}"
check "2 hosts x 2 ranks, TP 2 x DP 2: bitwise equal to one host" bitwise one-host-tp-dp two-hosts-tp-dp
check "2 hosts x 2 ranks, TP 2 x DP 2: no placement warning" no_warning "$TMP/two-hosts-tp-dp/err"

# DP 2 with a host each, gradients of 26 MB (one bucket; 7 of the exchange's 4 MiB chunks, so
# its two receive buffers are reused): between hosts the runtime all-reduces two ranks' fp32
# buffers of 1 MiB or more by exchanging them (comm/pair_reduction.h), on one host with
# MPI_Allreduce; the bits must be the same.
WIDER=(--hidden-size 512 --num-layers 2)
train one-host-dp 0 2 "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}"
train two-hosts-dp 2 1 "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}"
check "2 hosts x 1 rank, DP 2, 26 MB of gradients: bitwise equal to one host" \
  bitwise one-host-dp two-hosts-dp
# The exchanges between hosts go over a TCP connection of the pair's own (comm/pair_socket.h):
# the run above made it, so it printed no fallback warning; with TESSERA_PAIR_SOCKET=verbose the
# same run says which connection it made. With TESSERA_PAIR_SOCKET=0, or when no connection can
# be made (host1 offers only an address host0 has no route to: TESSERA_PAIR_SOCKET_IF selects
# 10.78.0.12 on a veth pair of host1's own, so the connection fails and host1 waits out its
# accept), they go
# through MPI's transport instead: one warning line with the reason, and the same bits.
pair_run() {  # pair_run NAME ENV...: the DP 2 run above with environment variables for both ranks
  local name="$1" env_args="" setting
  shift
  for setting in "$@"; do env_args="$env_args -x $setting"; done
  outputs "$name"
  logged "$name" bash "$MULTIHOST" --hosts 2 --slots 1 --mpirun-args "$env_args" -- \
    sh -c '[ "$(hostname)" != host1 ] || { ip link add pair0 type veth peer name pair1 &&
      ip addr add 10.78.0.12/24 dev pair0 && ip link set pair0 up && ip link set pair1 up; } &&
      exec "$0" "$@"' \
    "$BIN_DIR/tessera-train" "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}" "${OUTPUTS[@]}"
}
pair_run two-hosts-dp-verbose TESSERA_PAIR_SOCKET=verbose
pair_run two-hosts-dp-mpi TESSERA_PAIR_SOCKET=0
pair_run two-hosts-dp-unreachable TESSERA_PAIR_SOCKET_IF=10.78.0.0/24
pair_transport() {
  local fallback="^tessera: warning: the pair exchanges between host0 and host1 use MPI's TCP transport .* instead of a connection of their own"
  ! grep -q "$fallback" "$TMP/two-hosts-dp/err" &&
    [ "$(grep -c "^tessera: the pair exchanges between host0 and host1 use a TCP connection of their own, to host1 (10\.77\.0\.12:[0-9]*)\$" "$TMP/two-hosts-dp-verbose/err")" -eq 1 ] &&
    bitwise one-host-dp two-hosts-dp-verbose &&
    [ "$(grep -c "$fallback: TESSERA_PAIR_SOCKET=0 on host0\$" "$TMP/two-hosts-dp-mpi/err")" -eq 1 ] &&
    bitwise one-host-dp two-hosts-dp-mpi &&
    [ "$(grep -c "$fallback: cannot connect to host1 (10\.78\.0\.12:[0-9]*): Network is unreachable\$" "$TMP/two-hosts-dp-unreachable/err")" -eq 1 ] &&
    bitwise one-host-dp two-hosts-dp-unreachable
}
check "2 hosts x 1 rank, DP 2: own TCP connection by default; MPI's transport with TESSERA_PAIR_SOCKET=0 or no route, one warning, same bits" \
  pair_transport
# The same with ZeRO 1 and 3: between hosts the gradients are reduce-scattered, and the
# parameters all-gathered, by the exchange too, its sends on a thread of their own there
# (comm/pair_reduction.cc).
for stage in 1 3; do
  train one-host-dp-zero$stage 0 2 "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}" --zero-stage $stage
  train two-hosts-dp-zero$stage 2 1 "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}" --zero-stage $stage
  check "2 hosts x 1 rank, DP 2, ZeRO $stage, 26 MB of gradients: bitwise equal to one host" \
    bitwise one-host-dp-zero$stage two-hosts-dp-zero$stage
done
# Gradients reduced in bf16 (--grad-reduce-in-bf16): between hosts the two ranks' 16-bit
# all-reduce and reduce-scatter take the exchanges too (comm/sixteen_bit_reduction.h), on one host
# the all-reduce is MPI's under Tessera's operation; each element is round(a + b) either way.
for stage in 0 1; do
  train one-host-dp-bf16-sums$stage 0 2 "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}" \
    --zero-stage $stage --grad-reduce-in-bf16
  train two-hosts-dp-bf16-sums$stage 2 1 "${FLAGS[@]}" "${PIN[@]}" "${WIDER[@]}" \
    --zero-stage $stage --grad-reduce-in-bf16
  check "2 hosts x 1 rank, DP 2, ZeRO $stage, gradients reduced in bf16: bitwise equal to one host" \
    bitwise one-host-dp-bf16-sums$stage two-hosts-dp-bf16-sums$stage
done

TP_PP_DP=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1)
train one-host-tp-pp-dp 0 8 "${FLAGS[@]}" "${PIN[@]}" "${TP_PP_DP[@]}"
train four-hosts-tp-pp-dp 4 2 "${FLAGS[@]}" "${PIN[@]}" "${TP_PP_DP[@]}"
check "4 hosts x 2 ranks, TP 2 x PP 2 x DP 2, ZeRO 1: bitwise equal to one host" \
  bitwise one-host-tp-pp-dp four-hosts-tp-pp-dp

mesh() {
  bash "$MULTIHOST" --hosts 2 --slots 2 -- "$BIN_DIR/tessera-train" "${FLAGS[@]}" "${TP_DP[@]}" \
    --print-mesh >"$TMP/mesh" 2>&1 &&
    grep -q "^hosts: host0 \[0,1\], host1 \[2,3\]$" "$TMP/mesh" &&
    grep -Eq "^ +2 +0 +0 +1 +0 +0 +0 +1  host1$" "$TMP/mesh" || { cat "$TMP/mesh" >&2; false; }
}
check "--print-mesh names the hosts" mesh

train tp-across-hosts 2 1 "${FLAGS[@]}" "${TP_DP[@]}" --train-iters 2 --global-batch-size 2
check "TP 2 across 2 hosts: one warning naming the group" \
  test "$(grep -c '^warning: tensor-parallel group \[0,1\] spans hosts host0, host1' \
          "$TMP/tp-across-hosts/err")" -eq 1
# Threads by default: this machine's cores over the ranks of the rank's own host.
check "1 rank a host: $CORES threads" grep -q "compute bf16, $CORES threads" "$TMP/tp-across-hosts/out"
train two-a-host 2 2 "${FLAGS[@]}" "${TP_DP[@]}" --train-iters 1
half=$((CORES / 2 > 0 ? CORES / 2 : 1))
check "2 ranks a host: $half threads each" grep -q "compute bf16, $half threads" "$TMP/two-a-host/out"

# The example layouts (examples/multihost: machines of 4 ranks) and others of 8 ranks on 2 hosts
# of 4 keep every TP group inside a host: each "tp" group's ranks have one host in --print-mesh.
tp_inside_hosts() {
  /usr/bin/python3 - "$TMP/mesh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
host = {int(m.group(1)): m.group(2) for m in re.finditer(r"^ +(\d+)(?: +\d+){7}  (\S+)$", text, re.M)}
tp = re.search(r"^tp +(.*)$", text, re.M).group(1)
groups = [[int(r) for r in g.split(",")] for g in re.findall(r"\[([\d,]+)\]", tp)]
ok = len(host) == 8 and groups and all(len({host[r] for r in g}) == 1 for g in groups)
sys.exit(0 if ok and "spans hosts" not in text else 1)
PY
}
layout_mesh() {
  bash "$MULTIHOST" --hosts 2 --slots 4 -- "$BIN_DIR/tessera-train" "${FLAGS[@]}" "$@" \
    --print-mesh >"$TMP/mesh" 2>&1 && tp_inside_hosts || { cat "$TMP/mesh" >&2; false; }
}
example_layout=$(grep -o -- "--tensor-model-parallel-size [0-9]* --sequence-parallel --zero-stage [0-9]" \
  "$ROOT/examples/multihost/gpt2_350m_args.sh")
check "the example's layout flags are found" test -n "$example_layout"
# shellcheck disable=SC2086  # a list of flags
check "examples/multihost layout ($example_layout): TP inside hosts" layout_mesh $example_layout
check "TP 4 x DP 2: TP inside hosts" layout_mesh --tensor-model-parallel-size 4
check "TP 2 x PP 2 x DP 2: TP inside hosts" layout_mesh --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2
check "TP 2 x CP 2 x DP 2: TP inside hosts" layout_mesh --tensor-model-parallel-size 2 \
  --context-parallel-size 2

# Checkpoints across hosts: into a directory the hosts share, saved by 2 hosts and loaded on one;
# into one each host has privately (--private-dir), refused before training with one line, exit 2.
train save-across-hosts 2 2 "${FLAGS[@]}" "${TP_DP[@]}" --train-iters 4 --save "$TMP/shared-ckpt"
check "a checkpoint saved across hosts into a shared directory" \
  test -f "$TMP/shared-ckpt/latest_checkpointed_iteration.txt"
train load-on-one-host 0 4 "${FLAGS[@]}" "${TP_DP[@]}" --train-iters 6 --load "$TMP/shared-ckpt"
check "... loads on one host and trains on" grep -q "iteration        6/" "$TMP/load-on-one-host/out"
private_save() {
  TESSERA_SHARED_DIR_WAIT=1 timeout 120 bash "$MULTIHOST" --hosts 2 --slots 1 \
    --private-dir "$TMP/private-ckpt" --mpirun-args "-x TESSERA_SHARED_DIR_WAIT" -- \
    "$BIN_DIR/tessera-train" "${FLAGS[@]}" "${TP_DP[@]}" --global-batch-size 2 \
    --save "$TMP/private-ckpt" >"$TMP/private.out" 2>"$TMP/private.err"
  local code=$?
  [ "$code" -eq 2 ] &&
    [ "$(grep -c "^error: --save .*private-ckpt: rank 1 (host host1) does not see the files rank 0 (host host0) writes there" "$TMP/private.err")" -eq 1 ] ||
    { echo "  exit $code" >&2; cat "$TMP/private.err" >&2; false; }
}
check "--save into a directory each host has privately: one line, exit 2" private_save

# Teardown: the namespaces a run made (listed from inside it) are gone after it.
teardown() {
  bash "$MULTIHOST" --hosts 2 --slots 1 -- \
    sh -c 'ip netns list | awk "{print \$1}" | grep "^$TESSERA_MULTIHOST_PREFIX"' 2>/dev/null |
    sort -u >"$TMP/made" && [ "$(wc -l <"$TMP/made")" -eq 3 ] && no_namespace_left
}
check "no namespace (nor its veth and bridge) remains after a run" teardown
# ... nor after a run stopped by a TERM sent to the test bed alone while its program still runs
# (ctest's or a scheduler's kill): it waits for mpirun in the background, so its trap runs at
# once, kills the processes in the namespaces and removes them.
interrupted() {
  local bed code prefix="" waited
  bash "$MULTIHOST" --hosts 2 --slots 1 -- \
    sh -c 'echo "$TESSERA_MULTIHOST_PREFIX" > "$0"; exec sleep 607' "$TMP/interrupted.prefix" \
    2>"$TMP/interrupted.err" &
  bed=$!
  for waited in $(seq 60); do
    prefix=$(head -1 "$TMP/interrupted.prefix" 2>/dev/null) && [ -n "$prefix" ] && break
    sleep 0.5
  done
  kill -TERM "$bed"
  for waited in $(seq 20); do kill -0 "$bed" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$bed" 2>/dev/null; then  # still waiting on mpirun: fail (its trap cleans up once
    echo "  the test bed did not end within 10 s of its TERM" >&2  # its program is gone)
    pkill -9 -f "^sleep 607$"
    wait "$bed"
    return 1
  fi
  wait "$bed"
  code=$?
  sleep 2  # kill -9 is delivered at once but a process may take a moment to go
  [ "$code" -eq 130 ] && [ -n "$prefix" ] && ! ip netns list | grep -qE "^${prefix}(hub|h[0-9]+)( |$)" &&
    ! pgrep -f "^sleep 607$" >/dev/null ||
    { echo "  exit $code, prefix '$prefix'; namespaces: $(ip netns list | tr '\n' ' ')" >&2; false; }
}
check "no namespace or process remains after a run stopped by a signal" interrupted

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
