"""The closures of asynchronous training: D updates and G updates, run by the workers.

A D closure takes a real batch from its worker's own dataset (a shuffle of its
own, see data/pipeline.py `per_worker`) and either generates its fakes with the
G the parameter servers hold (mode 'closures') or takes the newest batch of the
sample buffer (mode 'sample_buffer', train/sample_buffer.py). A G closure
updates G against the D the servers hold and, with a buffer, leaves the fakes it
generated there. Every closure's noise is a pure function of its index, so a
closure the coordinator runs again sees the same noise.
"""

from __future__ import annotations

from typing import List

from absl import logging
import tensorflow as tf

from paragan_tf.data import class_groups
from paragan_tf.data import pipeline
from paragan_tf.distribute import cluster
from paragan_tf.train import config as config_lib
from paragan_tf.train import experiment as experiment_lib
from paragan_tf.train import sample_buffer
from paragan_tf.train import step as step_lib


def _noise(index: tf.Tensor, seed: int, batch: int, dim_z: int, classes: List[int]):
    """The noise of closure `index`: a pure function, so a re-run closure sees the same."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)])
    z = tf.random.stateless_normal([batch, dim_z], key)
    return z, class_groups.draw_labels(classes, [batch], key + 1)


class Closures:
    """The D-update and G-update closures of the workers, and their per-worker input.

    mode 'closures': a D closure generates its fakes with the G the servers hold.
    mode 'sample_buffer' (ParaGAN's): a G closure also writes the fakes it generated
    into a SampleBuffer, and a D closure trains on the newest batch there.
    """

    def __init__(self, exp: experiment_lib.Experiment, coordinator, start: int,
                 options: config_lib.AsyncConfig):
        cfg, strategy = exp.settings.train, exp.strategy
        k, batch, d_steps = cfg.accumulation, cfg.batch_size, cfg.d_steps
        dim_z, classes = exp.generator.dim_z, exp.classes
        gan_step = step_lib.for_experiment(exp, d_steps=1)  # a closure is one D update
        real_fn = pipeline.real_input_fn(exp.source, exp.settings.data, batch,
                                         cfg.seed * 1_000_003 + start, per_worker=True,
                                         classes=classes, inputs=exp.settings.inputs)
        self.real_it = iter(coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(real_fn)))
        d_seed, g_seed = cfg.seed * 2 + 1, cfg.seed * 2 + 2
        self.coordinator = coordinator
        self.buffer = buffer = None
        if options.mode == "sample_buffer":
            resolution = exp.settings.data.resolution
            self.buffer = buffer = sample_buffer.SampleBuffer(
                strategy, options.buffer_depth, batch,
                (resolution, resolution, exp.source.channels), dim_z, near=exp.step)
        g_iterations = exp.g_optimizer.iterations

        @tf.function(autograph=False)
        def d_closure(iterator, index):
            real = [next(iterator) for _ in range(k)]
            if buffer is None:
                noise = [_noise(index * k + i, d_seed, batch, dim_z, classes)
                         for i in range(k)]
                out = strategy.run(gan_step.d_update, args=(real, noise))
            else:  # accumulation is 1 (config.AsyncConfig checks)
                fakes, labels, z, version = buffer.read()
                out = strategy.run(gan_step.d_update, args=(real, [(z, labels)]),
                                   kwargs=dict(fakes=[fakes]))
                out["async/sample_age"] = tf.cast(g_iterations - version, tf.float32)
            return dict(out, process=cluster.process_id())

        @tf.function(autograph=False)
        def g_closure(index):
            noise = [_noise(index * k + i, g_seed, batch, dim_z, classes) for i in range(k)]
            if buffer is None:
                out = strategy.run(gan_step.g_update, args=(noise,))
            else:
                version = g_iterations.read_value()  # the G that generates the fakes

                def store(fakes, healthy):  # only fakes of a G whose update was finite
                    tf.cond(healthy, lambda: buffer.write(index, fakes[0], noise[0][1],
                                                          noise[0][0], version),
                            lambda: tf.constant(False))
                with tf.control_dependencies([version]):
                    out = strategy.run(gan_step.g_update, args=(noise,),
                                       kwargs=dict(on_fakes=store))
            return dict(out, process=cluster.process_id())

        @tf.function(autograph=False)
        def fill_closure(slot):
            # Noise of negative closure numbers: apart from every training closure's.
            z, labels = _noise(-1 - slot, g_seed, batch, dim_z, classes)
            fakes = exp.objective.generate(exp.generator, None, (z, labels))
            return buffer.write(slot, fakes, labels, z, g_iterations.read_value())

        def schedule(round_index: int) -> list:
            values = [coordinator.schedule(d_closure, args=(
                self.real_it, tf.constant(round_index * d_steps + j, tf.int64)))
                for j in range(d_steps)]
            values.append(coordinator.schedule(
                g_closure, args=(tf.constant(round_index, tf.int64),)))
            return values
        self.schedule = schedule
        self.d_closure, self.g_closure, self._fill_closure = d_closure, g_closure, fill_closure

    def fill_buffer(self) -> None:
        """Fills every slot of the sample buffer from the current G (before the first round)."""
        for slot in range(self.buffer.depth):
            self.coordinator.schedule(self._fill_closure,
                                      args=(tf.constant(slot, tf.int64),))
        self.coordinator.join()
        logging.info("sample buffer: %d of %d slots filled from the current G",
                     self.buffer.filled(), self.buffer.depth)
