"""Reference statistics for FID: the real images' mean and covariance, computed once and reused.

A Fréchet distance needs only the mean and covariance of the real features, and
embedding 10,000 real images through the Inception network takes ~10 minutes on
two CPU cores. `bin/eval.py --write_stats=PATH` stores them once, as an `.npz`
holding `mu`, `sigma` and the protocol they were measured under (`protocol`, a
JSON string); `eval.reference_stats=PATH` makes every later evaluation use them.

A file written here is used only under the same protocol (extractor and its
weights, resize, dataset, split, classes, image count): a mismatch is refused
by name rather than giving a number that cannot be compared. Files written
elsewhere (clean-fid's and TTUR's published statistics, e.g. CIFAR-10 train)
hold `mu` and `sigma` alone: they are accepted on the Inception extractor when
their dimension fits, and stamped as unverified, with the file's sha1, since
nothing in them says how they were measured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from paragan_tf import files
from paragan_tf.errors import ConfigError
from paragan_tf.eval import metrics

# The protocol fields a stored file must share with the evaluation that uses it.
MATCHED = ("extractor", "extractor_path", "extractor_sha1", "resize", "dataset",
           "reference_split", "classes", "real")


@dataclasses.dataclass(frozen=True)
class Reference:
    mu: np.ndarray
    sigma: np.ndarray
    protocol: Optional[dict]  # None: a file from elsewhere (mu and sigma only)
    path: str
    sha1: str

    @property
    def count(self) -> Optional[int]:
        return None if self.protocol is None else self.protocol["real"]


def _sha1(path: str) -> str:
    digest = hashlib.sha1()
    with tf.io.gfile.GFile(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write(path: str, features: np.ndarray, protocol: Dict[str, object]) -> Reference:
    """Stores the mean and covariance of [n, d] features with `protocol` at `path` (.npz)."""
    mu, sigma = metrics.statistics(features)
    protocol = {k: protocol[k] for k in MATCHED}
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    buffer = io.BytesIO()  # np.savez reads back what it writes: not on a remote GFile
    np.savez(buffer, mu=mu, sigma=sigma, protocol=json.dumps(protocol))
    files.write_whole(path, buffer.getvalue())
    return Reference(mu, sigma, protocol, path, _sha1(path))


def read(path: str, expected: Dict[str, object], feature_size: int) -> Reference:
    """The statistics at `path`, checked against the evaluation's protocol `expected`.

    Raises ConfigError naming the first field that differs, or the file's problem.
    """
    if not tf.io.gfile.exists(path):
        raise ConfigError(f"eval.reference_stats={path!r} does not exist; write it with "
                          f"bin/eval.py --write_stats={path}")
    try:
        with tf.io.gfile.GFile(path, "rb") as f, np.load(io.BytesIO(f.read())) as stored:
            mu, sigma = stored["mu"], stored["sigma"]
            protocol = json.loads(str(stored["protocol"])) if "protocol" in stored else None
    except (KeyError, ValueError, OSError) as e:
        raise ConfigError(f"eval.reference_stats={path!r} is not an .npz with 'mu' and "
                          f"'sigma': {str(e).splitlines()[0]}") from None
    if mu.shape != (feature_size,) or sigma.shape != (feature_size, feature_size):
        raise ConfigError(f"eval.reference_stats={path!r} holds mu {mu.shape} and sigma "
                          f"{sigma.shape}; the {expected['extractor']} features have "
                          f"{feature_size} dimensions")
    if protocol is None:
        if expected["extractor"] != "inception":
            raise ConfigError(f"eval.reference_stats={path!r} has no protocol (a file from "
                              f"elsewhere): usable only with the Inception extractor")
    else:
        for key in MATCHED:
            if protocol.get(key) != expected.get(key):
                raise ConfigError(
                    f"eval.reference_stats={path!r} was measured with {key}="
                    f"{protocol.get(key)!r}, this evaluation has {key}={expected.get(key)!r}; "
                    f"write statistics for it with bin/eval.py --write_stats")
    return Reference(mu.astype(np.float64), sigma.astype(np.float64), protocol, path,
                     _sha1(path))


def frechet_distance(reference: Reference, generated: np.ndarray) -> float:
    """The Fréchet distance of [n, d] generated features to the stored statistics."""
    return metrics.frechet_distance_from_statistics(reference.mu, reference.sigma,
                                                    *metrics.statistics(generated))
