#!/usr/bin/env bash
# What TensorFlow's graph optimiser (Grappler) costs a short run: gin/tiny.gin trained by
# bin/train.py on one device (4 steps), a two-worker MultiWorkerMirrored run of 2 steps
# with accumulation 2 (bin/launch_local.py, as tests/e2e/test_model_parallel.py starts it)
# and a parameter-server run of 20 steps (two workers, one ps, a coordinator), each with
# layout.graph_optimizer True then False, alternated R times (A B A B: the machine's drift
# falls on both). Prints wall seconds and user CPU seconds of every run.
#   bash benchmarks/probes/graph_optimizer_ab.sh [R=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export PARAGAN_TF_LAYOUT_TUNE=off
mwms=(--gin_bindings=train.sample_every=0 "--gin_bindings=strategy.kind='multi_worker_mirrored'"
      --gin_bindings=train.total_steps=2 --gin_bindings=train.checkpoint_every=1
      --gin_bindings=train.accumulation=2 --gin_bindings=dataset.shuffle_buffer=1)
for r in $(seq "$rounds"); do
  for on in True False; do
    /usr/bin/time -f "one device, graph_optimizer=$on: %e s wall, %U s user" \
      .venv/bin/python bin/train.py --gin_file=gin/tiny.gin --model_dir="$out/one_$r$on" \
      --gin_bindings=layout.graph_optimizer=$on 2>&1 >/dev/null | tail -1
    /usr/bin/time -f "two workers, graph_optimizer=$on: %e s wall, %U s user" \
      .venv/bin/python bin/launch_local.py --model_dir="$out/mwms_$r$on" \
      --gin_file=gin/tiny.gin --gin_bindings=layout.graph_optimizer=$on "${mwms[@]}" \
      2>&1 >/dev/null | tail -1
    /usr/bin/time -f "parameter server, graph_optimizer=$on: %e s wall, %U s user" \
      .venv/bin/python bin/launch_local.py --model_dir="$out/ps_$r$on" --num_ps=1 \
      --gin_file=gin/tiny.gin --gin_bindings=layout.graph_optimizer=$on \
      --gin_bindings=train.sample_every=0 "--gin_bindings=strategy.kind='parameter_server'" \
      --gin_bindings=train.total_steps=20 2>&1 >/dev/null | tail -1
  done
done
