"""Trainer options (`train.*` and `async_train.*` in gin) and their start-up checks."""

from __future__ import annotations

import dataclasses

import gin

from paragan_tf.errors import ConfigError


@gin.configurable("train")
@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Options of the synchronous trainer (`train.*` in gin), checked when made.

    Attributes:
      total_steps: train steps (G updates) to reach; a resumed run continues to it.
      max_minutes: also stop, as at the last step (final checkpoint, samples, log,
        train_result.json), once this many minutes of training have passed in this
        process (start-up excluded, the first traced call included); 0: no limit.
        For time-to-quality studies and fixed compute budgets; refused under
        MultiWorkerMirroredStrategy, whose workers' clocks would disagree on the step.
      batch_size: global batch per micro-batch, over all replicas.
      d_steps: D updates per G update, each on a fresh real batch.
      steps_per_loop: train steps inside one tf.function call (TPU iterations_per_loop).
      accumulation: micro-batches per update (gradient accumulation); the
        effective batch is batch_size * accumulation.
      clip_norm: clip each network's global gradient norm to this; 0 disables.
      ortho_reg: strength of BigGAN's orthogonal regularisation of G; 0 disables.
      ema_decay: decay of the EMA generator per G update.
      ema_half_life_images: instead of ema_decay, the EMA generator's half-life in
        images G trains on (train.ema_decay then left unset): batch-independent, as
        StyleGAN2-ADA's ema_kimg x 1000 (train/ema.py); 0: use ema_decay.
      ema_rampup: with ema_half_life_images, the half-life is at most this fraction of
        the images G has trained on so far (StyleGAN2-ADA: 0.05); 0: no ramp-up.
      ema_start_step: before this step the EMA generator equals G.
      log_every: steps between progress lines and scalar summaries.
      checkpoint_every: steps between checkpoints (one is always written at the end).
      sample_every: steps between sample grids (TensorBoard and samples/ PNGs); 0: none,
        not even after the last step (a benchmark's or a test's run).
      max_to_keep: checkpoints kept on disk.
      seed: seeds initialisation, shuffling and noise.
      simultaneous: compute the last D update and the G update from the same
        snapshot of both networks and apply both (ParaGAN's asynchronous
        update inside a synchronous strategy); False: G is updated against
        the freshly updated D.
      max_consecutive_skips: the NaN guard skips any step whose losses or gradients
        are non-finite; this many skipped steps in a row stop the run with an error.
      resume_input: 'replay': a resumed run fast-forwards the input streams to the
        checkpoint's position, so it sees exactly the data an uninterrupted run
        would (costs re-reading the skipped part; cheap for in-memory data);
        'reshuffle': it starts a fresh shuffle instead (for huge slow stores).
      deterministic: tf.config.experimental.enable_op_determinism() (tests of
        bit-exact reproducibility; may be slower).
      recompute: rematerialise every residual block of G and D in the backward
        pass: activation memory falls to about the blocks' inputs plus one
        block's insides, for roughly one more forward pass of compute
        (`bin/train.py --dry_run` prints both memory plans).
      profile_steps: trace this many steps with tf.profiler, starting after the first
        progress line (tracing and start-up left out), into model_dir (TensorBoard's
        Profile tab); the chief only. Those steps run slower. 0: no trace.
    """

    total_steps: int = gin.REQUIRED
    max_minutes: float = 0.0
    batch_size: int = 64
    d_steps: int = 2
    steps_per_loop: int = 10
    accumulation: int = 1
    clip_norm: float = 0.0
    ortho_reg: float = 0.0
    ema_decay: float = 0.999
    ema_half_life_images: float = 0.0
    ema_rampup: float = 0.0
    ema_start_step: int = 0
    log_every: int = 50
    checkpoint_every: int = 500
    sample_every: int = 500
    max_to_keep: int = 3
    seed: int = 0
    simultaneous: bool = False
    max_consecutive_skips: int = 20
    resume_input: str = "replay"
    deterministic: bool = False
    recompute: bool = False
    profile_steps: int = 0

    def __post_init__(self):
        positive = ("total_steps", "batch_size", "d_steps", "steps_per_loop", "accumulation",
                    "log_every", "checkpoint_every", "max_to_keep", "max_consecutive_skips")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be positive")
        if self.sample_every < 0:
            raise ConfigError(f"train.sample_every={self.sample_every} must be >= 0 (0: no "
                              "sample grids)")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"train.ema_decay={self.ema_decay} must be in [0, 1)")
        if self.ema_half_life_images < 0 or not 0.0 <= self.ema_rampup <= 1.0:
            raise ConfigError(f"train.ema_half_life_images={self.ema_half_life_images} must "
                              f"be >= 0 and train.ema_rampup={self.ema_rampup} in [0, 1]")
        default_decay = TrainConfig.__dataclass_fields__["ema_decay"].default
        if self.ema_half_life_images and self.ema_decay != default_decay:
            raise ConfigError(f"train.ema_half_life_images={self.ema_half_life_images} and "
                              f"train.ema_decay={self.ema_decay} both set the EMA's decay; "
                              f"leave train.ema_decay unset")
        if self.ema_rampup and not self.ema_half_life_images:
            raise ConfigError(f"train.ema_rampup={self.ema_rampup} needs "
                              f"train.ema_half_life_images (it ramps the half-life up)")
        if self.resume_input not in ("replay", "reshuffle"):
            raise ConfigError(f"train.resume_input={self.resume_input!r} must be 'replay' or "
                              f"'reshuffle'")
        if (self.clip_norm < 0 or self.ortho_reg < 0 or self.profile_steps < 0
                or self.max_minutes < 0):
            raise ConfigError("train.clip_norm, train.ortho_reg, train.profile_steps and "
                              "train.max_minutes must be >= 0")

    @property
    def g_images_per_update(self) -> int:
        """Images G trains on per update, over all replicas (its micro-batches)."""
        return self.batch_size * self.accumulation

    @property
    def real_images_per_step(self) -> int:
        """Real images D consumes per train step, over all replicas."""
        return self.batch_size * self.d_steps * self.accumulation


def check_batch(config: TrainConfig, num_replicas: int) -> None:
    """The global batch must split evenly over replicas."""
    if config.batch_size % num_replicas:
        raise ConfigError(
            f"train.batch_size={config.batch_size} is not divisible by the {num_replicas} "
            f"replicas of this strategy; use a multiple of {num_replicas}")


def defaults(config_class) -> dict:
    """A config class's defaults (constructing one would take gin's bindings instead)."""
    return {f.name: f.default for f in dataclasses.fields(config_class)}


ASYNC_MODES = ("closures", "sample_buffer")


@gin.configurable("async_train")
@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncConfig:
    """Options of the asynchronous trainer (`async_train.*` in gin), checked when made.

    Attributes:
      max_staleness: mode 'closures': rounds (d_steps D closures + one G closure) in
        flight at once; 1 is ParaGAN's one-step staleness, larger keeps fast workers
        busy longer when one straggles.
      stall_timeout_secs: no round finished for this long (from the first scheduled):
        fail rather than hang (a parameter server or all workers unreachable without a
        broken connection).
      mode: 'closures': every D closure generates its fakes with the G the servers
        hold; 'sample_buffer' (ParaGAN's): G closures write the fakes they generate
        into a buffer on the parameter servers and D closures train on the newest
        batch there, without waiting for any G (train/sample_buffer.py).
      buffer_depth: mode 'sample_buffer': batches the buffer holds, and the rounds in
        flight at once (it replaces max_staleness): the staleness bound.
    """

    max_staleness: int = 2
    stall_timeout_secs: float = 300.0
    mode: str = "closures"
    buffer_depth: int = 4

    def __post_init__(self):
        if self.max_staleness < 1:
            raise ConfigError(f"async_train.max_staleness={self.max_staleness} must be >= 1")
        if self.mode not in ASYNC_MODES:
            raise ConfigError(f"async_train.mode={self.mode!r} is unknown; choose one of "
                              f"{list(ASYNC_MODES)}")
        if self.buffer_depth < 1:
            raise ConfigError(f"async_train.buffer_depth={self.buffer_depth} must be >= 1")
        if self.stall_timeout_secs <= 0:
            raise ConfigError(f"async_train.stall_timeout_secs={self.stall_timeout_secs} "
                              f"must be positive")

    @property
    def rounds_in_flight(self) -> int:
        """Rounds scheduled at once: the staleness bound of the mode."""
        return self.buffer_depth if self.mode == "sample_buffer" else self.max_staleness
