# A SLURM cluster over multihost.sh's namespaces (sourced by multihost.sh --slurm; not run alone).
# Uses multihost.sh's HOSTS, SLOTS, WORK, HUB, PREFIX, PRIVATE_DIR and fail().
#
# start_slurm: munged with a key made for this run (its socket in $WORK, so the machine's own
# munge, if any, is neither used nor disturbed); slurmctld in the hub as host "hub"
# (10.77.0.1); slurmd in each host namespace as node hostI (10.77.0.1I), SLOTS CPUs each (the
# configured count, not the machine's: config_overrides, so more ranks than cores can be
# placed, as mpirun --oversubscribe does); then waits until every node is idle. Everything
# lives in $WORK/slurm and goes with the namespaces when multihost.sh cleans up (munged, in the
# root namespace, by its pid file).
#
# The hosts share this machine's file system, where real nodes would not: each slurmd gets a
# mount namespace with private tmpfs mounts where two nodes would otherwise collide — the PMIx
# plugin's per-step client directory (PMIxCliTmpDirBase) and /sys/fs/cgroup (an empty one: the
# cluster uses no cgroups — proctrack/linuxproc, task/affinity — but slurmd 22.05 starts its
# cgroup plugin anyway and must not meet this machine's hierarchy, v1 or v2, or another node's).

start_slurm() {
  local dir="$WORK/slurm" i
  mkdir -p "$dir/state" "$dir/pmix" "$WORK/munge" || fail "cannot create $dir"
  chmod 700 "$WORK/munge"
  head -c 1024 /dev/urandom >"$WORK/munge/munge.key" && chmod 400 "$WORK/munge/munge.key" ||
    fail "cannot write the munge key"
  munged --force --socket="$WORK/munge/socket" --key-file="$WORK/munge/munge.key" \
    --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/munge/munged.log" \
    --seed-file="$WORK/munge/seed" 2>"$WORK/munge/start.err" ||
    fail "munged did not start: $(tail -n 1 "$WORK/munge/start.err")"

  {
    echo "ClusterName=tessera"
    echo "SlurmctldHost=hub(10.77.0.1)"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$WORK/munge/socket"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmctldLogFile=$dir/slurmctld.log"
    echo "SlurmdSpoolDir=$dir/spool.%n"
    echo "SlurmdPidFile=$dir/slurmd.%n.pid"
    echo "SlurmdLogFile=$dir/slurmd.%n.log"
    echo "SlurmdParameters=config_overrides"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/affinity"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    for ((i = 0; i < HOSTS; i++)); do
      echo "NodeName=host$i NodeAddr=10.77.0.$((11 + i)) CPUs=$SLOTS Sockets=1" \
        "CoresPerSocket=$SLOTS ThreadsPerCore=1 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$dir/cgroup.conf"
  echo "PMIxCliTmpDirBase=$dir/pmix" >"$dir/mpi.conf"
  export SLURM_CONF="$dir/slurm.conf"

  ip netns exec "$HUB" unshare --uts sh -c "hostname hub && exec slurmctld -i" ||
    fail "slurmctld did not start: $(tail -n 2 "$dir/slurmctld.log" 2>/dev/null)"
  local private_mount=""
  [ -n "$PRIVATE_DIR" ] && private_mount="mount -t tmpfs tessera-private '$PRIVATE_DIR' && "
  for ((i = 0; i < HOSTS; i++)); do
    ip netns exec "${PREFIX}h$i" unshare --uts --mount --propagation private sh -c \
      "mount -t tmpfs tessera-pmix '$dir/pmix' && mount -t tmpfs tessera-cgroup /sys/fs/cgroup &&
       ${private_mount}hostname host$i && exec slurmd" ||
      fail "slurmd of host$i did not start: $(tail -n 2 "$dir/slurmd.host$i.log" 2>/dev/null)"
  done

  # Nodes register within a second or two; 30 s covers a loaded machine.
  local states=""
  for ((i = 0; i < 60; i++)); do
    states=$(ip netns exec "$HUB" sinfo -h -N -o "%N %t" 2>/dev/null)
    [ "$(grep -c " idle$" <<<"$states")" -eq "$HOSTS" ] && return 0
    sleep 0.5
  done
  fail "the SLURM nodes did not become idle within 30 s (sinfo: $(tr '\n' ' ' <<<"$states"); logs in $dir)"
}
