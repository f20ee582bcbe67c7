#!/usr/bin/env bash
# Take down what .ci/slurm-up.sh started, by the PIDs it recorded, and remove its state directory.
set -uo pipefail
STATE=${SLURM_STATE:-/tmp/hnnsym-slurm}
[ -d "$STATE" ] || exit 0
for name in slurmd slurmctld munged; do
  pidfile="$STATE/$name.pid"
  [ -s "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
done
[ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$STATE/slurm.conf" ] && rm -f /etc/slurm/slurm.conf
rm -rf "$STATE"
