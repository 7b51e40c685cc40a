"""The floor that measures: what builds and times a real train step, above train/
(docs/architecture.md).

tuning (what to time for a step, the cache key, the choice) · timing (candidates timed in
child processes within the budget) · probe (one candidate's child process) · step_timer
(the one way a built step is timed: the probe, bin/plan.py --calibrate and the step
benchmark) · traced (the step's two updates traced, for the plans) · built (what the plans
say of a built experiment). Below it, layout/ and scale/ are rules and arithmetic.
"""
