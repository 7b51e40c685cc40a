"""Training read through local tf.data service workers (data/service.py)."""

from __future__ import annotations

import numpy as np

from tests.helpers.training import train_tiny


def test_reading_through_local_tf_data_service_workers(tiny_gin, tmp_path):
    result = train_tiny(tiny_gin, tmp_path, "input_pipeline.service_workers = 2")
    assert result["step"] == 6 and np.isfinite(result["loss/D"])
