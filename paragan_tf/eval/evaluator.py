"""Evaluation of a generator: distances to the real data, scores, conditional accuracy, best kept.

Used in the training loop (every `eval.every_steps`) and by bin/eval.py (one
checkpoint, or a sidecar watching a model_dir). Generation and feature
extraction run under the experiment's strategy: each replica generates and
embeds its share of every batch, the results are gathered.

Every evaluation uses the same latents and labels (a fixed seed, classes
balanced), so successive checkpoints are compared on the same samples. The
EMA generator gets standing BN statistics first, as for sample grids.

Results go to `<output_dir>/metrics.json` (all evaluations, and the best by
the Fréchet distance) and to TensorBoard as `metrics/<name>`; the best
checkpoint's files are copied to `<output_dir>/best/`.

When the reference images are a held-out split (the dataset has a test split),
`d_logit_gap` measures D's overfitting (Karras et al. 2020, figure 1): D's mean
logit on training images minus its mean logit on as many held-out images, each
with its own label and without augmentation. Near 0 D judges both alike; a
growing gap is D memorising the training set.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Callable, Dict, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from paragan_tf import teardown
from paragan_tf.data import pipeline
from paragan_tf.errors import ConfigError
from paragan_tf.eval import features as features_lib
from paragan_tf.eval import history as history_lib
from paragan_tf.eval import metrics
from paragan_tf.eval import reference_stats
from paragan_tf.eval.config import EvalConfig
from paragan_tf.eval.subject import Subject
from paragan_tf.generate import sampling

PROGRESS_SECONDS = 30.0  # a progress line at most this often in a long evaluation phase


class Evaluator:
    """Evaluates a run's EMA generator (an eval.subject.Subject); keeps metrics.json and
    the best checkpoint."""

    def __init__(self, run: Subject, output_dir: str, config: Optional[EvalConfig] = None,
                 write: bool = True):
        self.run, self.output_dir, self.write = run, output_dir, write
        self.config = cfg = config or run.eval_config
        if cfg.batch_size % run.strategy.num_replicas_in_sync:
            raise ConfigError(f"eval.batch_size={cfg.batch_size} is not divisible by the "
                              f"{run.strategy.num_replicas_in_sync} replicas")
        kind = features_lib.resolve_kind(cfg.feature_extractor, run.source.channels,
                                         cfg.classifier_path)
        path = cfg.classifier_path if kind == "classifier" else cfg.inception_path
        with run.strategy.scope():
            self.extractor = features_lib.load(kind, path, run.data.resolution,
                                               run.source.channels, run.source.name)
        self.names = self.extractor.names
        self._real: Optional[Dict[str, np.ndarray]] = None
        self._loops: Dict[str, tuple] = {}  # name: (traced step, iterator); see _run
        self.reference_split, self._reference = self._reference_images()
        self.num_real = self._available_real()
        self.protocol = self._protocol()
        if self.protocol["prdc_samples"] <= cfg.nearest_k + 1:
            raise ConfigError(f"eval.num_samples={cfg.num_samples} and eval.num_real="
                              f"{self.num_real} must exceed eval.nearest_k + 1 ("
                              f"{cfg.nearest_k + 1}) for precision, recall, density, coverage")
        self.reference: Optional[reference_stats.Reference] = None
        if cfg.reference_stats:
            self._use_reference_stats(cfg.reference_stats)
        tf.io.gfile.makedirs(output_dir)
        self.history = history_lib.History(output_dir, {
            "metric": self.names["frechet"], "extractor": self.extractor.kind,
            "extractor_path": self.extractor.path, "protocol": self.protocol})

    def _reference_images(self):
        """(split, dataset) of the real images compared (eval.reference_split)."""
        split, run = self.config.reference_split, self.run
        if split != "auto":
            return split, run.source.make(split)
        try:  # the test split when the dataset has one
            return "test", run.source.make("test")
        except ConfigError:
            return run.data.split, run.source.make(run.data.split)

    def _use_reference_stats(self, path: str) -> None:
        """Compares with the stored statistics at `path` from now on (checked first)."""
        run = self.run
        probe = tf.zeros([1, run.data.resolution, run.data.resolution, run.source.channels])
        feature_size = self.extractor.info.get("features") or int(
            self.extractor.call(probe)["features"].shape[-1])
        self.reference = reference_stats.read(path, self.protocol, feature_size)
        ref, p = self.reference, self.protocol
        label = (f"{p['reference_split']}{self._thousands(ref.count)}" if ref.protocol else
                 os.path.splitext(os.path.basename(path))[0])
        p.update(name=f"{self.names['frechet']}{self._thousands(p['generated'])}_{label}",
                 real=ref.count, reference_stats=ref.path, reference_stats_sha1=ref.sha1,
                 prdc_samples=0)
        if ref.protocol is None:
            p["reference_split"] = "unknown (statistics from elsewhere)"
        logging.info("comparing with the statistics in %s (sha1 %s, %s): the Fréchet "
                     "distance only; KID, intra-class distance and precision/recall/"
                     "density/coverage need the real features", path, ref.sha1[:12],
                     "measured under this protocol" if ref.protocol else
                     "no protocol stored: unverified")

    def write_stats(self, path: str) -> reference_stats.Reference:
        """Embeds the real images and stores their statistics with the protocol at `path`."""
        features = self.real_features()["features"]
        written = reference_stats.write(path, features, self.protocol)
        logging.info("wrote the statistics of %d %s images of %s to %s (sha1 %s)",
                     len(features), self.reference_split, self.run.source.name, path,
                     written.sha1[:12])
        return written

    def _available_real(self) -> int:
        """eval.num_real, or the reference split's images of this run's classes where there
        are fewer: a setting is an upper bound, so the default (10,000) works on small data
        such as mnist5k's 5,000. Counted before any work, stamped in the protocol."""
        cfg, run = self.config, self.run
        examples = pipeline.keep_classes(self._reference, run.classes, run.source.num_classes)
        available = int(tf.data.experimental.cardinality(examples))
        if available < 0:  # unknown (a filter, files): count up to the setting
            available = int(examples.take(cfg.num_real).reduce(
                np.int64(0), lambda count, _: count + 1))
        if available >= cfg.num_real:
            return cfg.num_real
        if not available:
            raise ConfigError(f"the {self.reference_split} split of {run.source.name} has no "
                              f"images of this run's classes to evaluate against")
        logging.warning("eval.num_real=%d, but the %s split of %s has %d images of this "
                        "run's classes: evaluating against those", cfg.num_real,
                        self.reference_split, run.source.name, available)
        return available

    def _protocol(self) -> Dict[str, object]:
        """What every value of this evaluator measured: name, extractor, counts, split, resize.

        The name follows StyleGAN2-ADA's (`fid50k_full`): the distance, the generated
        samples in thousands, the reference split and its size, e.g. `fcd5k_test10k`.
        """
        cfg, run = self.config, self.run
        fits = {"pad": "padded (larger: cropped)", "resize": "centre-cropped and area-resized",
                "auto": "padded if smaller, else centre-cropped and area-resized"}
        resize = f"{fits.get(run.data.fit, run.data.fit)} to {run.data.resolution} px"
        if self.extractor.kind == "inception":
            resize += f", then {self.extractor.info['resize']}"

        thousands = self._thousands
        name = (f"{self.names['frechet']}{thousands(cfg.num_samples)}_{self.reference_split}"
                f"{thousands(self.num_real)}")
        return {"name": name, "extractor": self.extractor.kind,
                "dataset": run.source.name, "classes": [int(c) for c in run.classes],
                "extractor_path": self.extractor.path,
                **{f"extractor_{k}": v for k, v in self.extractor.info.items()
                   if k in ("network", "weights", "sha1")},
                "truncation": None,  # latents drawn from N(0, 1), untruncated
                "generated": cfg.num_samples,
                "real": self.num_real, "reference_split": self.reference_split,
                "resize": resize, "prdc_samples": min(cfg.prdc_samples, cfg.num_samples,
                                                      self.num_real),
                "nearest_k": cfg.nearest_k,
                "logit_gap_samples": (self._gap_samples() if self.reference_split !=
                                      run.data.split else 0)}

    @staticmethod
    def _thousands(n: int) -> str:
        return f"{n / 1000:g}k"

    def _gap_samples(self) -> int:
        """Images per side of the logit gap: the training stream's (per_class_limit and
        class groups applied), at most the real images compared."""
        run = self.run
        n = self.num_real
        if run.data.per_class_limit:
            n = min(n, run.data.per_class_limit * len(run.classes))
        return n

    def _fitted(self, ds: tf.data.Dataset, n: int) -> tf.data.Dataset:
        """The first n examples of `ds` (of this run's classes), fitted."""
        run = self.run
        ds = pipeline.keep_classes(ds, run.classes, run.source.num_classes)
        return ds.map(lambda image, label: (pipeline.fit_image(image, run.data.resolution,
                                                               run.data.fit), label),
                      num_parallel_calls=tf.data.AUTOTUNE).take(n)

    def logit_gap(self) -> float:
        """D's mean logit on training images minus on held-out images (see the module doc)."""
        n = self.protocol["logit_gap_samples"]
        run = self.run

        def d_logits(batch):
            images, labels = batch
            return {"logits": run.discriminator((images, labels), training=False)}
        train = self._run("logit gap, training images", lambda: self._fitted(
            pipeline.training_examples(run.source, run.data, run.source.make), n).cache(),
            d_logits, n)
        held_out = self._run("logit gap, held-out images",
                             lambda: self._fitted(self._reference, n).cache(), d_logits, n)
        return float(np.mean(train["logits"]) - np.mean(held_out["logits"]))

    def _run(self, name: str, examples: Callable[[], tf.data.Dataset], fn,
             n: int) -> Dict[str, np.ndarray]:
        """fn on the first n examples of examples() in batches (eval.batch_size, or n if
        smaller; the last may be partial), per replica under the strategy; the outputs
        concatenated in order.

        No replica may get an empty share of a batch: TensorFlow 2.21's oneDNN Conv2D
        returns its input unchanged on an empty batch (shape [0, 299, 299, 3] out of
        Inception's first conv instead of [0, 149, 149, 32]; benchmarks/probes/
        empty_batch_conv.py), which fails a later layer. So a pass is padded to a
        multiple of the replicas with its own first examples, dropped again on the host.

        The first call per `name` makes the dataset, repeated, and traces the step; both are
        kept, and every call reads exactly one pass, so each evaluation sees the same
        examples. Kept because dropping a distributed iterator costs seconds in TensorFlow
        2.21 (its destructor waits for tf.data's threads), at every evaluation: 0.2-15 s a
        pass, more than generating 2,500 latents, on 2 cores at 3.67 GHz on 2026-11-24
        (`bin/bench.py --suite=eval_scaling`, commit e8fbd29; docs/benchmarks.md).
        Each fn reads only this evaluator's fixed models, never per-call values.

        Every example carries its position in the pass, checked on the way out: short data
        (a pass of fewer than n examples, which would wrap around) is refused by name. The
        batches are split by examples (AutoShardPolicy.DATA), never by files, so every
        worker of a cluster reads the same pass and the replicas' parts keep its order.
        """
        strategy = self.run.strategy
        padded = n + -n % strategy.num_replicas_in_sync
        batch = min(padded, self.config.batch_size)  # the batch size divides by the replicas
        if name not in self._loops:
            ds = examples().take(n).enumerate()
            ds = ds.concatenate(ds.take(padded - n)).batch(batch).repeat()
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.DATA)
            ds = ds.with_options(options)

            @tf.function(autograph=False)  # traced twice where the last batch is partial
            def step(indexed):
                def indexed_fn(index, batch):
                    return dict(fn(batch), index=tf.cast(index, tf.int32))
                out = strategy.run(indexed_fn, args=indexed)
                return {k: strategy.gather(v, axis=0) for k, v in out.items()}
            self._loops[name] = step, iter(strategy.experimental_distribute_dataset(ds))
            # Destroying it can block for a minute: parked when this evaluator is freed.
            weakref.finalize(self, teardown.park, self._loops[name][1])
        step, iterator = self._loops[name]
        parts, batches = [], -(-padded // batch)
        start = last_log = time.monotonic()
        try:
            for i in range(batches):
                parts.append(step(next(iterator)))
                if time.monotonic() - last_log > PROGRESS_SECONDS and i + 1 < batches:
                    # Long on a CPU (the float32 FID Inception: 18-25 images/s on the
                    # 2-core machines of docs/benchmarks.md's eval suite): say how far.
                    last_log = time.monotonic()
                    done = min(n, (i + 1) * batch)
                    logging.info("%s: %d of %d (%.0f s, about %.0f s to go)", name, done, n,
                                 last_log - start, (last_log - start) * (n - done) / done)
        except StopIteration:  # the repeated dataset is empty
            parts = []
        out = ({k: np.concatenate([p[k].numpy() for p in parts])[:n] for k in parts[0]}
               if parts else {})
        index = out.pop("index", np.zeros(0, np.int32))
        if not np.array_equal(index, np.arange(n)):
            found = index.max() + 1 if len(index) else 0
            raise ConfigError(f"{name}: the data has only {found} of the {n} needed; lower "
                              f"eval.num_real")
        return out

    def real_features(self) -> Dict[str, np.ndarray]:
        """Features and labels of the `num_real` real images compared (computed once)."""
        if self._real is None:
            def embed_real(batch):
                return {"features": self.extractor.call(batch[0])["features"],
                        "labels": batch[1]}
            # Per-class runs are compared with the real images of their own classes.
            n = self.num_real
            self._real = self._run("real images", lambda: self._fitted(self._reference, n),
                                   embed_real, n)
        return self._real

    def _generated(self) -> Dict[str, np.ndarray]:
        cfg, run = self.config, self.run
        g = run.generator_ema

        def latents_and_labels():
            classes = tf.constant(run.classes, tf.int32)
            labels = tf.gather(classes, tf.range(cfg.num_samples) % len(run.classes))
            z = sampling.latents(cfg.num_samples, g.dim_z, cfg.seed)
            return tf.data.Dataset.from_tensor_slices((z, labels))

        def generate_and_embed(batch):
            z, labels = batch
            out = self.extractor.call(g((z, labels), training=False))
            out["labels"] = labels
            return out
        return self._run("generated samples", latents_and_labels, generate_and_embed,
                         cfg.num_samples)

    def _host_metrics(self, real: Optional[Dict[str, np.ndarray]],
                      gen: Dict[str, np.ndarray]) -> Dict[str, float]:
        """The distances and scores of the generated features against the real ones."""
        cfg, names = self.config, self.names
        gen_features = gen["features"]
        if self.reference is not None:  # statistics only: no per-sample comparisons
            result = {names["frechet"]: reference_stats.frechet_distance(self.reference,
                                                                         gen_features)}
            return dict(result, **self._generated_only(gen))
        real_features = real["features"]
        kid, kid_std = metrics.kernel_distance(real_features, gen_features, cfg.kid_block_size)
        result = {names["frechet"]: metrics.frechet_distance(real_features, gen_features),
                  names["kernel"]: kid}
        if np.isfinite(kid_std):  # undefined with a single block (fewer samples than a block)
            result[names["kernel"] + "_std"] = kid_std
        result["intra_class_" + names["frechet"]] = metrics.intra_class_frechet(
            real_features, real["labels"], gen_features, gen["labels"])
        n = self.protocol["prdc_samples"]
        # The generated samples cycle through the classes, so any prefix is balanced.
        result.update(metrics.precision_recall_density_coverage(
            real_features[:n], gen_features[:n], cfg.nearest_k))
        return dict(result, **self._generated_only(gen))

    def _generated_only(self, gen: Dict[str, np.ndarray]) -> Dict[str, float]:
        """The scores of the generated samples alone (no real images needed)."""
        result = {}
        if "logits" in gen:  # the FID network has no classification head: no score
            result[self.names["score"]] = metrics.classifier_score(gen["logits"])
        if self.extractor.kind == "classifier":
            result["conditional_accuracy"] = metrics.conditional_accuracy(
                np.argmax(gen["logits"], -1), gen["labels"])
        return result

    def evaluate(self, step: int, checkpoint: Optional[str] = None,
                 writer=None) -> Dict[str, float]:
        """Evaluates the EMA generator as it is now (the weights of `checkpoint`, if given)."""
        start = time.perf_counter()
        cfg, run = self.config, self.run
        seconds: Dict[str, float] = {}  # per phase, for the log line

        def timed(phase, fn):
            began = time.perf_counter()
            out = fn()
            seconds[phase] = time.perf_counter() - began
            return out
        timed("standing BN", lambda: sampling.refresh_bn_statistics(
            run.generator_ema, run.source.num_classes, classes=run.classes))
        real = None if self.reference else timed("real", self.real_features)
        gen = timed("generation", self._generated)
        result = timed("metrics", lambda: self._host_metrics(real, gen))
        if self.protocol["logit_gap_samples"]:
            result["d_logit_gap"] = timed("logit gap", self.logit_gap)
        # What the run's stats.jsonl records beside the values (benchmarks read it).
        self.timings = dict(seconds=time.perf_counter() - start, samples=cfg.num_samples,
                            replicas=run.strategy.num_replicas_in_sync, phases=seconds)
        # The generation is what the replicas share (each generates and embeds its part of
        # every batch); the metrics run on the host.
        logging.info("eval at step %d (%.1f s; %d samples generated and embedded in %.1f s "
                     "on %d replica(s); %s; %s): %s", step, time.perf_counter() - start,
                     cfg.num_samples, seconds["generation"], run.strategy.num_replicas_in_sync,
                     ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()
                               if k != "generation"),
                     self.protocol["name"], "  ".join(f"{k} {v:.4g}" for k, v in result.items()))
        if not self.write:
            return result
        if writer is not None:
            with writer.as_default():
                for k, v in result.items():
                    tf.summary.scalar(f"metrics/{k}", v, step=step,
                                      description=self.describe())
        self.history.record(step, checkpoint, self.protocol["name"], result,
                            key=self.names["frechet"])
        return result

    def describe(self) -> str:
        """The protocol in one line, for summaries and tables."""
        p = self.protocol
        source = (f"{p['extractor_network']}, {p['extractor_weights']} sha1 "
                  f"{p['extractor_sha1'][:12]}" if p.get("extractor_sha1") else
                  p["extractor_path"])
        if p.get("reference_stats"):
            reference = (f"the statistics in {p['reference_stats']} (sha1 "
                         f"{p['reference_stats_sha1'][:12]}; {p['real'] or 'unknown'} real "
                         f"images of the {p['reference_split']} split)")
        else:
            reference = (f"{p['real']} real images of the {p['reference_split']} split; "
                         f"precision/recall/density/coverage on {p['prdc_samples']} each, "
                         f"k={p['nearest_k']}")
        return (f"{p['name']}: {p['extractor']} features ({source}), "
                f"{p['generated']} generated vs {reference}, {p['resize']}" +
                (f"; D's logit gap on {p['logit_gap_samples']} training vs held-out "
                 f"images" if p.get("logit_gap_samples") else ""))
