#!/usr/bin/env bash
# CPU seconds of one tiny training process (bin/train.py, gin/tiny.gin) at an earlier commit
# against this checkout, alternated N times (A B A B: the machine's drift falls on both).
#   bash benchmarks/probes/train_cpu_ab.sh REV [N=3]
# REV is checked out in a temporary git worktree and run with this checkout's .venv, its
# own code first on PYTHONPATH. Prints each run's wall and user+system CPU seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
rev=$1
n=${2:-3}
out=$(mktemp -d)
git worktree add -q --detach "$out/before" "$rev"
trap 'git worktree remove --force "$out/before"; rm -rf "$out"' EXIT
run() {  # $1: a label, $2: the tree to run
  (cd "$2" && PYTHONPATH="$2" PARAGAN_TF_LAYOUT_TUNE=off \
     /usr/bin/time -f "%e %U %S" -o "$out/time" "$here/.venv/bin/python" bin/train.py \
     --gin_file=gin/tiny.gin --model_dir="$out/run_$1_$i" >/dev/null 2>&1)
  awk -v l="$1" '{printf "%-7s %6.2f s wall %6.2f CPU s\n", l, $1, $2 + $3}' "$out/time"
}
for i in $(seq "$n"); do
  run "$rev" "$out/before"
  run "HEAD" "$here"
done
