"""TensorFlow 2.21: destroying an autotuned tf.data iterator can block for up to a minute.

    TF_USE_LEGACY_KERAS=1 python benchmarks/repro/teardown_hang.py [mirrored|onedevice|plain]
        [SECONDS=45] [--one-cpu]

Pulls from an iterator for SECONDS, then times `del iterator`. mirrored (the default):
MirroredStrategy over 2 logical CPUs, three autotune model threads (the host iterator
and one per device); onedevice: OneDeviceStrategy; plain: `iter(dataset)`, no
tf.distribute. --one-cpu pins the process to one core (a busy machine), which makes
the race more likely. Why 45 s: the autotune period doubles from 10 ms up to 60 s;
an optimisation at ~41 s sets it to 60 s, so a wake-up lost at 45 s waits ~37 s.
Measured on 2 cores (2026-11-25): mirrored 7 of 7 runs 37-97 s; onedevice and plain
3 of 6-7 runs ~37 s, the others 0.1-0.4 s. The cause and the report for TensorFlow:
docs/upstream/tf_data_teardown.md.
"""

import gc
import os
import sys
import time

args = [a for a in sys.argv[1:] if not a.startswith("--")]
mode, seconds = (args + ["mirrored"])[0], float((args + ["", 45])[1])
if "--one-cpu" in sys.argv:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402  (after the affinity)

if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
elif mode == "onedevice":
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")


def dataset(context=None):
    return (tf.data.Dataset.range(10**9).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(4).prefetch(tf.data.AUTOTUNE))


iterator = (iter(dataset()) if mode == "plain"
            else iter(strategy.distribute_datasets_from_function(dataset)))
began = time.time()
while time.time() - began < seconds:
    next(iterator)
    time.sleep(0.1)
began = time.time()
del iterator
gc.collect()
print(f"{mode}: deleting the iterator took {time.time() - began:.2f} s", flush=True)
