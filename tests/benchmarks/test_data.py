"""The data benchmark suite (benchmarks/data.py) on a small folder."""

import pytest

from benchmarks import data as data_bench


@pytest.mark.slow
def test_the_data_benchmark_on_a_small_folder():
    # 10 timed batches after 3 of warm-up: past the first shuffle window (8 batches), so
    # the timed part reads records (3 would all come from the first window's buffer).
    result = data_bench.data_suite(sizes=(200,), batches=10, progress=lambda _: None)
    row = result["sizes"]["200"]
    assert row["shards"] == 1 and "200 images of 10 classes" in row["prepare"]["summary"]
    assert row["prepare"]["peak_rss_bytes"] > 100e6  # the tool and a worker, TF loaded
    assert set(row["startup_seconds"]) == {"image_folder_full_scan", "image_folder_lazy",
                                           "records"}
    rates = row["records_images_per_sec"]
    assert rates["latency_read_parallelism_1"] < rates["no_latency_read_parallelism_1"]
