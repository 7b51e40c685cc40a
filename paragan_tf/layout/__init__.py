"""The layout: how a run uses its hardware (docs/design.md section 5).

rules (hardware detection; the precision, channel padding and XLA rules; the
`layout.*` settings) · choice (what a measurement decides, one type for candidates and
`auto`'s pick) · env (the variables TensorFlow starts with: oneDNN, threads; the restart
protocol) · cache (the measured choices, per machine) · tuning (what to time for a step,
the cache key, the choice) · timing (candidates timed in child processes within the
budget) · candidates (what each stage times) · probe (one candidate's child process).
The first four sit in the bottom layer of the package picture (docs/architecture.md),
the others in train's: they build and time the training step.
"""
