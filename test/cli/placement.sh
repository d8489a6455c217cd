#!/usr/bin/env bash
# Placements from outside (docs/layout.md): a run of logical DP4 x PP2 placed on 2
# physical replicas, replayed on one (supervisor replay's default) and on its own
# placement, bitwise both times; supervisor plan and the startup block name the
# placement; bad placements are refused with one error naming the field and the numbers,
# nothing written (exit 2, as every config rule of supervisor run and a malformed command
# line; docs/runtime.md, "Refused at the start").
# Usage: placement.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"

small=(--set parallel.data=4 --set parallel.pipeline=2 --set batch.global_batch_size=16
       --set training.train_samples=64 --set lr_schedule.warmup_samples=16 --set logging.tensorboard=false
       --set checkpoint.interval_steps=2 --set checkpoint.save_on_exit=false)

expect run 0 "placement: 4 logical replicas on 2 physical ones: physical q computes q, q + 2 in turn" -- \
  "$supervisor" run "${small[@]}" --set parallel.physical_replicas=2 --set logging.run_dir="$work/run"
expect replay-small 0 "bitwise equal: steps 3..4" -- "$supervisor" replay "$work/run" --step 4
grep -qF "placement: 4 logical replicas on 1 physical one: physical q computes q, q + 1, q + 2, q + 3 in turn" \
  "$work/replay-small.out" || { echo "FAIL replay-small: the placement is not named"; fails=$((fails + 1)); }
expect replay-placed 0 "placement: 4 logical replicas on 2 physical ones" -- \
  "$supervisor" replay "$work/run" --step 4 --physical-replicas 0
expect replay-bad 2 "--physical-replicas must be 0 (the run's placement) or more, got -1" -- \
  "$supervisor" replay "$work/run" --step 4 --physical-replicas -1
# The run's placement history: the start and the placement of each checkpoint.
expect placements 0 "start       2 physical replicas (parallel.physical_replicas)" -- \
  "$supervisor" inspect "$work/run" --placements
[ "$(grep -c "written by 2 physical replicas" "$work/placements.out")" -eq 2 ] ||
  { echo "FAIL placements: two checkpoints by 2 physical replicas expected"; cat "$work/placements.out";
    fails=$((fails + 1)); }
expect placements-not-a-run 1 "config.textproto: missing: RUN_DIR is not a run directory" -- \
  "$supervisor" inspect "$work" --placements
expect plan 0 "placement" -- "$supervisor" plan --set parallel.data=4 --set parallel.physical_replicas=1
grep -qF "4 logical replicas on 1 physical one" "$work/plan.out" ||
  { echo "FAIL plan: the placement is not named"; fails=$((fails + 1)); }

# Refusals: exit 2, nothing written.
expect not-dividing 2 "parallel.physical_replicas: 3 does not divide parallel.data = 4" -- \
  "$supervisor" run "${small[@]}" --set parallel.physical_replicas=3 --set logging.run_dir="$work/never-1"
expect replicated 2 "needs parallel.distributed_optimizer" -- \
  "$supervisor" run "${small[@]}" --set parallel.physical_replicas=2 --set parallel.distributed_optimizer=false \
  --set logging.run_dir="$work/never-2"
# More worker processes than the placement has physical ranks (4: 2 physical replicas x PP2).
expect too-many-workers 2 "cluster.workers: 5 workers for 4 rank(s)" -- \
  "$supervisor" run "${small[@]}" --set parallel.physical_replicas=2 --set cluster.workers=5 --listen 127.0.0.1:0 \
  --set logging.run_dir="$work/never-4"
# The checkpoint of logical DP4 x PP2 offered to a placement of logical DP2 x PP2.
expect other-layout 2 "written under the logical layout data 4 x pipeline 2 x tensor 1" -- \
  "$supervisor" run --set parallel.data=2 --set parallel.pipeline=2 --set batch.global_batch_size=16 \
  --set training.train_samples=96 --set lr_schedule.warmup_samples=16 --set logging.tensorboard=false \
  --set parallel.physical_replicas=1 --set checkpoint.dir="$work/run/checkpoints" --set checkpoint.load=latest \
  --set logging.run_dir="$work/never-3"
for d in never-1 never-2 never-3 never-4; do
  [ -e "$work/$d" ] && { echo "FAIL $d: a refused start wrote $work/$d"; fails=$((fails + 1)); }
done
[ "$(ls "$work/run/checkpoints" | grep -c '^step_')" -eq 2 ] ||
  { echo "FAIL other-layout: the checkpoint root changed: $(ls "$work/run/checkpoints")"; fails=$((fails + 1)); }

[ "$fails" -eq 0 ] && echo "placement: all checks passed" || echo "placement: $fails check(s) failed"
exit $((fails > 0))
