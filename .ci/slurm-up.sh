#!/usr/bin/env bash
# Bring up a single-node Slurm on this machine for tests/cli/test_slurm.py (CI runs as root on Debian):
# install slurmctld, slurmd, slurm-client and munge if missing (apt-get), write a slurm.conf for
# this host (hostname -s, nproc, memory; no cgroups, no accounting database: job completions go
# to a text file; a requeued job held 10 s, not Slurm's default 120 s (AuthInfo cred_expire), and
# pending jobs tried every 2 s, not 30-60 s, so that a requeue is over in seconds; OverTimeLimit=0:
# the time limit is exact), start munged, slurmctld and slurmd as this user's children, and wait until
# sinfo shows the node idle. Everything lives in $SLURM_STATE (default /tmp/hnnsym-slurm); the
# PIDs are in $SLURM_STATE/*.pid for .ci/slurm-down.sh. Exit 0 when up; non-zero with one line
# on stderr saying why not (no root, no apt, a daemon that did not start).
set -euo pipefail
STATE=${SLURM_STATE:-/tmp/hnnsym-slurm}
say() { echo "slurm-up: $*" >&2; }

if [ "$(id -u)" != 0 ]; then say "needs root (to install Slurm and run slurmd)"; exit 3; fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
  command -v apt-get >/dev/null || { say "Slurm is not installed and there is no apt-get"; exit 3; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || { say "apt-get update failed (no network?)"; exit 3; }
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null 2>&1 \
    || { say "apt-get install of slurmctld slurmd slurm-client munge failed"; exit 3; }
fi

mkdir -p "$STATE"/{spool,ctld,log,munge} /etc/slurm
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))

# munge: its own key, socket and pid file under $STATE (never the system's running munged)
if [ ! -s "$STATE/munge/munge.key" ]; then
  dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
fi
chown -R munge: "$STATE/munge" 2>/dev/null || true
chmod 700 "$STATE/munge"; chmod 400 "$STATE/munge/munge.key"
SOCKET="$STATE/munge/munge.socket"
runuser -u munge -- munged --key-file="$STATE/munge/munge.key" --socket="$SOCKET" \
  --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
  --seed-file="$STATE/munge/munged.seed" --force \
  || { say "munged did not start ($STATE/munge/munged.log)"; exit 4; }
cp "$STATE/munge/munged.pid" "$STATE/munged.pid"

CONF="$STATE/slurm.conf"
cat > "$CONF" <<CONF
ClusterName=hnnsym-ci
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET,cred_expire=10
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
MinJobAge=600
KillWait=5
OverTimeLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
ln -sf "$CONF" /etc/slurm/slurm.conf

# No accounting database here, so sacct knows no jobs; submitit asks it for their states. This
# stand-in answers submitit's query (sacct -o JobID,State,NodeList --parsable2 -j ID ...) from
# scontrol, which keeps finished jobs for MinJobAge seconds. Tests put $STATE/bin first in PATH.
mkdir -p "$STATE/bin"
cat > "$STATE/bin/sacct" <<'SHIM'
#!/usr/bin/env bash
ids=()
while [ $# -gt 0 ]; do case $1 in -j) ids+=("$2"); shift 2;; *) shift;; esac; done
echo "JobID|State|NodeList"
for id in "${ids[@]}"; do
  scontrol -o show job "$id" 2>/dev/null | awk '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = substr($i, length(kv[1]) + 2) }
    id = ("ArrayTaskId" in f) ? f["ArrayJobId"] "_" f["ArrayTaskId"] : f["JobId"]
    print id "|" f["JobState"] "|" f["NodeList"]; delete f }'
done
SHIM
chmod +x "$STATE/bin/sacct"
export SLURM_CONF="$CONF"

slurmctld -f "$CONF" || { say "slurmctld did not start ($STATE/log/slurmctld.log)"; exit 4; }
slurmd -f "$CONF" || { say "slurmd did not start ($STATE/log/slurmd.log)"; exit 4; }
for _ in $(seq 60); do
  if [ "$(sinfo -h -n "$HOST" -o %t 2>/dev/null)" = idle ]; then
    echo "slurm-up: $HOST idle (partition debug, $CPUS CPUs, $MEM_MB MB) in $STATE"
    exit 0
  fi
  sleep 0.5
done
say "the node did not become idle: $(sinfo -h -o '%t %E' 2>&1 | head -1)"
exit 4
