"""The layout: how a run uses its hardware (docs/design.md section 5).

rules (hardware detection; the precision, channel padding and XLA rules; the
`layout.*` settings) · choice (what a measurement decides, one type for candidates and
`auto`'s pick) · env (the variables TensorFlow starts with: oneDNN, threads; the restart
protocol) · cache (the measured choices, per machine) · candidates (what each stage of the
tuner times). Rules only: the tuner that builds and times the training step is in
paragan_tf/measure/.
"""
