"""tf.data service on 127.0.0.1: preprocessing moved off the training step's threads.

`input_pipeline.service_workers = N` starts, in the trainer's process, one
dispatcher and N tf.data service workers on loopback ports, and the real-image
pipeline is then read through them (every stage up to batching runs in the
workers; prefetching stays with the trainer). On one machine this shows the
mechanism and isolates preprocessing threads; on a cluster the same
`distribute()` call would point at remote workers (docs/design.md section 4).
"""

from __future__ import annotations

from typing import List

from absl import logging
import tensorflow as tf

_service = tf.data.experimental.service


class LocalDataService:
    """A dispatcher and `num_workers` workers in this process, alive as long as this object."""

    def __init__(self, num_workers: int):
        self.dispatcher = _service.DispatchServer(_service.DispatcherConfig(port=0))
        address = self.dispatcher.target.split("://", 1)[1]
        self.workers: List[object] = [
            _service.WorkerServer(_service.WorkerConfig(
                dispatcher_address=address, worker_address="127.0.0.1:%port%", port=0))
            for _ in range(num_workers)]
        logging.info("tf.data service: dispatcher %s, %d worker(s) on 127.0.0.1",
                     self.dispatcher.target, num_workers)

    def distribute(self, dataset: tf.data.Dataset, job_name: str) -> tf.data.Dataset:
        """`dataset`, produced by the service's workers (each worker runs a full copy)."""
        return dataset.apply(_service.distribute(
            processing_mode=_service.ShardingPolicy.OFF, service=self.dispatcher.target,
            job_name=job_name))
