#!/usr/bin/env bash
# A blend of datasets from outside (docs/data.md, "Blends"): three datasets prepared by
# prepare-data, blended by Megatron's --data-path words; the run's step and eval lines
# carry each dataset's counts and loss, the checkpoint's manifest its position; a replay
# of the run is bitwise; plan prints the shares; bad blends are refused with one error
# naming the field or the file, nothing written (exit 2 for a config rule, 1 for a file
# that is missing or damaged; docs/runtime.md, "Refused at the start").
# Usage: blend.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
rm -rf "$work"
mkdir -p "$work/text"
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"

# Three corpora with different letters, blank-line separated documents.
for name in web code books; do
  : >"$work/text/$name.txt"
done
for i in $(seq 1 150); do
  printf 'the web page number %d says hello to the world wide web again and again\n\n' "$i" >>"$work/text/web.txt"
  printf 'int f%d(int x) { return x * %d + 1; } // code sample with braces\n\n' "$i" "$i" >>"$work/text/code.txt"
  printf 'Chapter %d. It was a dark and stormy night, and the book went on.\n\n' "$i" >>"$work/text/books.txt"
done
for name in web code books; do
  expect "prepare-$name" 0 "documents" -- "$supervisor" prepare-data --input "$work/text/$name.txt" \
    --format blank-lines --output "$work/$name"
done

printf -- '--data-path 0.3 %s 0.5 %s 0.2 %s\n--split 90,10,0\n' "$work/web" "$work/code" "$work/books" \
  >"$work/blend.args"
small=(--megatron-args "$work/blend.args" --set parallel.data=2 --set parallel.pipeline=2
       --set batch.global_batch_size=8 --set batch.seq_length=32 --set training.train_samples=32
       --set lr_schedule.warmup_samples=8 --set training.eval_samples=8 --set training.eval_interval=2
       --set logging.tensorboard=false --set checkpoint.interval_steps=2 --set checkpoint.save_on_exit=false)

expect run 0 "data: a blend of 3 datasets" -- "$supervisor" run "${small[@]}" --set logging.run_dir="$work/run"
steps=$(grep -c '"type":"step".*"datasets":\[{"prefix":"'"$work"'/web"' "$work/run/metrics.jsonl")
[ "$steps" -eq 4 ] || { echo "FAIL run: $steps of 4 step lines carry the blend's datasets"; fails=$((fails + 1)); }
grep -q '"type":"startup".*"blend":\[{"prefix":"'"$work"'/web","weight":0.3}' "$work/run/metrics.jsonl" ||
  { echo "FAIL run: the startup line does not name the blend"; fails=$((fails + 1)); }
evals=$(grep -c '"type":"eval".*"datasets":\[' "$work/run/metrics.jsonl")
[ "$evals" -ge 2 ] || { echo "FAIL run: $evals eval lines carry per-dataset losses"; fails=$((fails + 1)); }
expect replay 0 "bitwise equal: steps 3..4" -- "$supervisor" replay "$work/run" --step 4
expect inspect 0 "blend dataset     $work/code" -- "$supervisor" inspect "$work/run/checkpoints/step_00000004"
expect plan 0 "data.blend: 3 datasets, Megatron's BlendedDataset rule over 32 samples" -- \
  "$supervisor" plan --megatron-args "$work/blend.args" --set training.train_samples=32 \
  --set batch.global_batch_size=8
expect blend-order 0 "1" -- "$supervisor" plan --megatron-args "$work/blend.args" --blend-order 11
[ "$(tr -d '\n' <"$work/blend-order.out")" = "10210121010" ] ||
  { echo "FAIL blend-order: $(tr -d '\n' <"$work/blend-order.out") is not megatron-core's 10210121010";
    fails=$((fails + 1)); }

# Refusals: nothing written; exit 2 for a rule of the config, 1 for a missing dataset.
printf -- '--data-path 0 %s 1 %s\n' "$work/web" "$work/code" >"$work/zero.args"
expect zero-weight 2 "data.blend[0].weight: 0 is not a finite weight > 0" -- \
  "$supervisor" run --megatron-args "$work/zero.args" --set logging.run_dir="$work/never-1"
printf -- '--data-path 1 %s 1 %s\n' "$work/web" "$work/missing" >"$work/missing.args"
expect missing 1 "$work/missing.idx" -- \
  "$supervisor" run --megatron-args "$work/missing.args" --set logging.run_dir="$work/never-2"
printf -- '--data-path 1 %s 1 %s\n' "$work/web" "$work/web" >"$work/twice.args"
expect twice 2 "is listed twice in data.blend" -- \
  "$supervisor" run --megatron-args "$work/twice.args" --set logging.run_dir="$work/never-3"
printf -- '--data-path %s %s\n' "$work/web" "$work/code" >"$work/unweighted.args"
expect unweighted 2 "2 prefixes without weights" -- \
  "$supervisor" run --megatron-args "$work/unweighted.args" --set logging.run_dir="$work/never-4"
for d in never-1 never-2 never-3 never-4; do
  [ -e "$work/$d" ] && { echo "FAIL $d: a refused start wrote $work/$d"; fails=$((fails + 1)); }
done

[ "$fails" -eq 0 ] && echo "blend: all checks passed" || echo "blend: $fails check(s) failed"
exit $((fails > 0))
