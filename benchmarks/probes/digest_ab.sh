#!/usr/bin/env bash
# Does a change keep training bit for bit? The final weights digest of one training run
# (bin/train.py on $GIN_FILE, default gin/tiny.gin, plus the gin bindings given) at an
# earlier commit and at this checkout (or at the commit $AFTER); the two lines must match
# where the change is meant to keep behaviour.
#   bash benchmarks/probes/digest_ab.sh REV ["layout.precision='mixed_float16'" ...]
#   GIN_FILE=gin/mnist_default.gin bash benchmarks/probes/digest_ab.sh REV train.total_steps=50
#   AFTER=544c08f bash benchmarks/probes/digest_ab.sh 544c08f^ ...   # one commit's effect
# Each commit runs from a temporary git worktree with this checkout's .venv, its own code
# first.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
rev=$1
shift
bindings=()
for b in "$@"; do bindings+=("--gin_bindings=$b"); done
out=$(mktemp -d)
git worktree add -q --detach "$out/before" "$rev"
cleanup() {
  git worktree remove --force "$out/before"
  [ -z "${AFTER:-}" ] || git worktree remove --force "$out/after"
  rm -rf "$out"
}
trap cleanup EXIT
after_tree=$here
if [ -n "${AFTER:-}" ]; then
  git worktree add -q --detach "$out/after" "$AFTER"
  after_tree=$out/after
fi
for side in before after; do
  tree=$([ "$side" = before ] && echo "$out/before" || echo "$after_tree")
  name=$([ "$side" = before ] && echo "$rev" || echo "${AFTER:-HEAD}")
  (cd "$tree" && PYTHONPATH="$tree" PARAGAN_TF_LAYOUT_TUNE=off "$here/.venv/bin/python" \
     bin/train.py --gin_file="${GIN_FILE:-gin/tiny.gin}" --model_dir="$out/run_$side" "${bindings[@]}" 2>&1) |
    grep -o "final weights digest [0-9a-f]*" |
    sed "s/^/$name ($(git -C "$tree" rev-parse --short HEAD)): /"
done
