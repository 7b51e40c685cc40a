"""What a traced update is to the plans: the two graphs of a train step's updates
(paragan_tf/measure/traced.py traces them from the step itself, nothing runs), read by the
memory plan (scale/memory.py replays them) and the roofline (scale/roofline.py costs their
ops).

They are traced at PROBE_BATCH examples: a tensor whose leading axis is that batch (or
twice it, D's reals and fakes together) is per-example, the rest fixed. G's ops carry one
device label and D's another (as model_parallel.placement='split' would place them; the
labels only name the ops).
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

PROBE_BATCH = 7  # odd and prime: no kernel, channel or class axis is mistaken for it
BATCH_AXES = {PROBE_BATCH, 2 * PROBE_BATCH}
# Ops whose output is their first input's buffer (a view: no allocation, no traffic).
ALIASES = {"Identity", "IdentityN", "StopGradient", "Reshape", "ExpandDims", "Squeeze",
           "Snapshot", "EnsureShape"}
# Device labels of G's and D's ops in the traced updates.
SIDE_DEVICES = {"G": "/device:CPU:0", "D": "/device:CPU:1"}

# {'d_update': its graph, 'g_update': its graph}: each update's loss and gradients.
UpdateGraphs = Dict[str, tf.Graph]
