#!/usr/bin/env bash
# Can the tests made cheaper still fail, and by the check meant to catch the break? Each
# variant breaks one line of this checkout in a scratch git worktree (sed, checked to have
# changed the file) and runs the test that must catch it, with this checkout's .venv and the
# worktree's code first; one line per variant: CAUGHT (the test failed, and its log has the
# variant's expected failure: an extended regex on the failing source line or its message),
# FAILED OTHERWISE (it failed, but not there: a crash, another check; the first error
# shown), PASSED (the test is blind to it) or NOT APPLIED (the line moved).
#   bash benchmarks/probes/broken_variants.sh                 # every variant
#   bash benchmarks/probes/broken_variants.sh accumulation    # the ones named
# Two at a time on two cores: BROKEN_JOBS=1 for one.
set -uo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)

# name | file | sed expression | test (pytest node id) | expected failure | environment
VARIANTS=(
  "accumulation|paragan_tf/train/step.py|s#loss /= self.config.accumulation#loss = loss#|tests/train/test_step.py::test_accumulating_two_micro_batches_equals_two_replicas_of_one|Not equal to tolerance|"
  "inception_bgr|paragan_tf/eval/inception.py|s#    return x / 128.0 - 1.0#    return x[..., ::-1] / 128.0 - 1.0#|tests/eval/test_inception.py::test_fid_matches_the_reference|against the reference's|"
  "rates_ignored|paragan_tf/train/optimizers.py|s#peak = scaled_learning_rate(c.learning_rate,#peak = scaled_learning_rate(2e-3,#|tests/benchmarks/test_time_to_quality.py|FROZEN_MARGIN|"
  "every_worker_slow|benchmarks/straggler.py|s#f\"CongestedStore.workers = ({index},)\"#\"CongestedStore.workers = (0, 1)\"#|tests/benchmarks/test_async_quality.py::test_the_sample_buffer_under_a_congested_store_on_one_worker|d_closures\\[\"worker:1\"\\] < 0.75|"
  "throttle_noop|benchmarks/straggler.py|s#process.send_signal(signal.SIGSTOP)#process.poll()#|tests/benchmarks/test_straggler.py|assert _throttle_works|"
  "stop_record_dropped|paragan_tf/train/controller.py|s#                self._record_stop(flag.signum)#                pass#|tests/train/test_controller.py::test_sigterm_ends_the_call_then_checkpoints_and_raises_interrupted|assert len\\(stops\\) == 1|"
  "clock_per_process|benchmarks/async_quality.py|s#seconds = {r\[\"step\"\]: r\[\"time\"\] - began#seconds = {r[\"step\"]: r[\"wall_seconds\"]#|tests/benchmarks/test_async_quality.py::test_a_synchronous_job_that_loses_a_worker_is_relaunched_and_resumes|\\[\"seconds\"\\]|"
  "gate_swap_logits|||tests/e2e/test_learning_gate.py|assert z_score > GAP_STANDARD_ERRORS|LEARNING_GATE_BREAK=swap_logits PYTEST_PLUGINS=benchmarks.probes.learning_gate_breaks"
  "gate_freeze_g|||tests/e2e/test_learning_gate.py|assert accuracy > MIN_ACCURACY|LEARNING_GATE_BREAK=freeze_g PYTEST_PLUGINS=benchmarks.probes.learning_gate_breaks"
  "gate_freeze_d|||tests/e2e/test_learning_gate.py|assert z_score > GAP_STANDARD_ERRORS|LEARNING_GATE_BREAK=freeze_d PYTEST_PLUGINS=benchmarks.probes.learning_gate_breaks"
)

run_variant() {
  local name=$1 file=$2 expr=$3 test=$4 expected=$5 env=$6
  local tree log
  tree=$(mktemp -d)/tree
  git worktree add -q --detach "$tree" HEAD
  log="$tree.log"
  if [ -n "$file" ]; then
    sed -i "$expr" "$tree/$file"
    if git -C "$tree" diff --quiet; then
      echo "$name: NOT APPLIED ($file: '$expr' changed nothing)"
      git worktree remove --force "$tree"
      return
    fi
  fi
  local began=$SECONDS
  (cd "$tree" && env $env PYTHONPATH="$tree" PARAGAN_TF_LAYOUT_TUNE=off \
     "$here/.venv/bin/python" -m pytest -x -q -p no:cacheprovider "$test" >"$log" 2>&1)
  local code=$?
  local verdict=PASSED
  if [ $code -eq 1 ]; then
    # The failing source line (">") and the errors ("E") of the report, searched for the
    # expected check.
    if grep -E "^(>|E) " "$log" | grep -qE -- "$expected"; then
      verdict=CAUGHT
    else
      verdict="FAILED OTHERWISE (expected /$expected/)"
    fi
  fi
  [ $code -gt 1 ] && verdict="ERROR (pytest exit $code)"
  echo "$name: $verdict in $((SECONDS - began)) s: $test"
  grep -m1 -E "^E " "$log" | cut -c1-200 | sed 's/^/    /'
  git worktree remove --force "$tree"
}

selected=("$@")
jobs=${BROKEN_JOBS:-2}
for entry in "${VARIANTS[@]}"; do
  IFS='|' read -r name file expr test expected env <<<"$entry"
  if [ ${#selected[@]} -gt 0 ] && [[ ! " ${selected[*]} " == *" $name "* ]]; then continue; fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_variant "$name" "$file" "$expr" "$test" "$expected" "$env" &
done
wait
