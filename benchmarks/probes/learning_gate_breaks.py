"""The learning gate's negative controls: training broken on purpose, as a pytest plugin.

    LEARNING_GATE_BREAK=<variant> .venv/bin/python -m pytest \
        -p benchmarks.probes.learning_gate_breaks tests/e2e/test_learning_gate.py -s

Variants (the gate, tests/e2e/test_learning_gate.py, must fail on each; it prints the
values it checks):
- `swap_logits`: D's loss takes the real logits for the fake ones and back, as if
  step.py had them swapped (G's loss is left as it is), in the loss pair the step's
  objective uses (the run's BigGAN objective, families/biggan/objective.py);
- `freeze_g`: G's learning rate set to 0 after building: G never learns;
- `freeze_d`: D's learning rate set to 0: a D that learns nothing, which a check
  without a margin can pass by chance.
Unset, the plugin changes nothing. The margins these values set are in the gate's
own comments.
"""

from __future__ import annotations

import os

VARIANTS = ("swap_logits", "freeze_g", "freeze_d")


def _swapped(loss_fn):
    def swapped(real_logits, fake_logits, gen_logits):
        d_loss, _ = loss_fn(fake_logits, real_logits, gen_logits)
        _, g_loss = loss_fn(real_logits, fake_logits, gen_logits)
        return d_loss, g_loss
    return swapped


def _zero_rate():
    import tf_keras as keras

    class Zero(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.0

    # A schedule, because tf_keras lets a schedule replace any rate (a float may not
    # replace a schedule).
    return Zero()


def break_experiment(exp, variant: str) -> None:
    """Breaks the built experiment `exp` as `variant` says, in what the step uses (its
    objective, its optimizers); tests/benchmarks/test_learning_gate_breaks.py holds that each
    variant reaches the step."""
    if variant not in VARIANTS:
        raise ValueError(f"LEARNING_GATE_BREAK={variant!r}; choose one of {VARIANTS}")
    if variant == "swap_logits":
        from paragan_tf.objective import losses
        loss = exp.objective.loss
        exp.objective.loss = losses.LossPair(_swapped(loss.fn), loss.pairs_real)
    else:
        optimizer = exp.g_optimizer if variant == "freeze_g" else exp.d_optimizer
        optimizer.learning_rate = _zero_rate()


def pytest_configure(config):
    variant = os.environ.get("LEARNING_GATE_BREAK")
    if not variant:
        return
    if variant not in VARIANTS:
        raise ValueError(f"LEARNING_GATE_BREAK={variant!r}; choose one of {VARIANTS}")
    from paragan_tf.train import experiment
    build = experiment.build

    def broken_build(*args, **kwargs):
        exp = build(*args, **kwargs)
        break_experiment(exp, variant)
        print(f"learning gate broken on purpose: {variant}")
        return exp

    experiment.build = broken_build
