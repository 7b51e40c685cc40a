#!/usr/bin/env bash
# Does a change keep the scale plan's numbers? bin/plan.py with the arguments given, at an
# earlier commit and at this checkout, compared number by number (each target's row, and
# per model-parallel mode: fits, accumulation x micro-batch, recompute, the memory per
# device, the traffic added), whatever shape the JSON took; prints each difference, or
# that there is none.
#   bash benchmarks/probes/plan_ab.sh 53f528d --gin_file=gin/biggan_imagenet128.gin \
#     --devices=v100x8,a100x16,h100x64,v100x1
# REV runs from a temporary git worktree with this checkout's .venv, its own code first.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
rev=$1
shift
out=$(mktemp -d)
git worktree add -q --detach "$out/before" "$rev"
trap 'git worktree remove --force "$out/before"; rm -rf "$out"' EXIT
for side in before HEAD; do
  tree=$([ "$side" = before ] && echo "$out/before" || echo "$here")
  (cd "$tree" && PYTHONPATH="$tree" "$here/.venv/bin/python" bin/plan.py "$@" \
     --output="$out/$side.json" > "$out/$side.log" 2>&1) || { tail -5 "$out/$side.log"; exit 1; }
done
"$here/.venv/bin/python" - "$out/before.json" "$out/HEAD.json" <<'PY'
import json, sys

def numbers(path):
    """{(target, what): value} of one plan file."""
    found = {}
    for row in json.load(open(path))["plans"]:
        modes = row.pop("modes")
        for key, value in row.items():
            found[(row["target"], key)] = value
        for name, mode in modes.items():
            if name in ("needed", "why"):
                found[(row["target"], f"modes.{name}")] = mode
                continue
            memory = mode.get("memory_gib_per_device")
            memory = sorted(memory.values()) if isinstance(memory, dict) else \
                [] if memory is None else [memory]
            for key in ("fits", "accumulation", "micro_batch", "recompute",
                        "extra_mib_per_step"):
                if mode.get("fits"):
                    found[(row["target"], f"modes.{name}.{key}")] = mode.get(key)
            found[(row["target"], f"modes.{name}.memory_gib")] = memory
            found[(row["target"], f"modes.{name}.fits")] = bool(mode.get("fits"))
    return found

before, after = numbers(sys.argv[1]), numbers(sys.argv[2])
differ = [(k, before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
          if before.get(k) != after.get(k)]
for key, old, new in differ:
    print(f"{key[0]} {key[1]}: {old!r} -> {new!r}")
print(f"{len(before)} numbers compared, {len(differ)} differ")
PY
