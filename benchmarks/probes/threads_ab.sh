#!/usr/bin/env bash
# Do TensorFlow's intra-op threads pay on a busy machine? N tiny training runs at once
# (bin/train.py, gin/tiny.gin, as the suite's workers run them side by side), first with
# TensorFlow's default threads, then with TF_NUM_INTRAOP_THREADS=1, alternated R times
# (A B A B: the machine's drift falls on both). Prints each round's wall time and the
# rounds' summed user+system CPU seconds.
#   bash benchmarks/probes/threads_ab.sh [N=3] [R=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-3}
rounds=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
round() {  # $1: a label, $2: TF_NUM_INTRAOP_THREADS ("" for TensorFlow's default)
  local began=$SECONDS
  for i in $(seq "$n"); do
    (if [ -n "$2" ]; then export TF_NUM_INTRAOP_THREADS=$2; fi
     PARAGAN_TF_LAYOUT_TUNE=off /usr/bin/time -f "%U %S" -o "$out/$1_$i.time" \
       .venv/bin/python bin/train.py --gin_file=gin/tiny.gin --model_dir="$out/run_$1_$i" \
       >/dev/null 2>&1) &
  done
  wait
  cat "$out"/"$1"_*.time | awk -v l="$1" -v w=$((SECONDS - began)) \
    '{c += $1 + $2} END {printf "%-12s %4d s wall %7.2f CPU s in %d processes\n", l, w, c, NR}'
  rm -rf "$out"/run_* "$out"/*.time
}
for r in $(seq "$rounds"); do
  round "default_$r" ""
  round "intra1_$r" 1
done
