#!/usr/bin/env bash
# Prints the two srun lines of a troupe cluster run for the current allocation
# (salloc / inside sbatch): the supervisor on the first node, a worker per task.
#   scripts/slurm/srun-lines.sh CONFIG [SECRET_FILE]
# Run the first line in the background, then the second; docs/cluster.md explains them.
set -euo pipefail
CONFIG=${1:?usage: scripts/slurm/srun-lines.sh CONFIG [SECRET_FILE]}
SECRET=${2:-$PWD/troupe-${SLURM_JOB_ID:?not inside a Slurm allocation}.secret}
BIN=${TROUPE_BIN:-$PWD/build/apps/supervisor}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=${TROUPE_PORT:-$((29500 + SLURM_JOB_ID % 1000))}
[ -f "$SECRET" ] || echo "# first: (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \\n' > $SECRET)"
echo "srun --nodes=1 --ntasks=1 --nodelist=$HEAD --overlap $BIN run $CONFIG --listen 0.0.0.0:$PORT --secret-file $SECRET &"
echo "srun --ntasks=$SLURM_NTASKS --overlap bash -c '$BIN worker --connect $HEAD:$PORT --secret-file $SECRET --host \$SLURMD_NODENAME --slots \${SLURM_CPUS_PER_TASK:-1}'"
