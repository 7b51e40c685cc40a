#!/usr/bin/env bash
# Does running TensorFlow processes side by side on few cores cost CPU seconds, not only
# wall time? The same tiny training run (bin/train.py, gin/tiny.gin) alone, twice, then N at
# once; each process's user+system CPU seconds from /usr/bin/time.
#   bash benchmarks/probes/contention.sh [N=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-3}
out=$(mktemp -d)
run() {  # $1: a name
  PARAGAN_TF_LAYOUT_TUNE=off /usr/bin/time -f "$1 %e s wall %U user %S sys" -o "$out/$1.time" \
    .venv/bin/python bin/train.py --gin_file=gin/tiny.gin --model_dir="$out/$1" >/dev/null 2>&1
}
run alone1; run alone2
for i in $(seq "$N"); do run "together$i" & done
wait
for f in "$out"/*.time; do
  awk '{printf "%-10s %6.2f s wall %6.2f CPU s\n", $1, $2, $5 + $8}' "$f"
done
rm -rf "$out"
