"""An evaluation folder's record (eval/history.py): every evaluation in metrics.json, read
again by each writer, and the best checkpoint copied to best/."""

from __future__ import annotations

import os

from paragan_tf.eval import history


def _checkpoint(folder: str, step: int) -> str:
    path = os.path.join(folder, f"ckpt-{step}")
    for suffix in (".index", ".data-00000-of-00001"):
        with open(path + suffix, "w") as f:
            f.write(str(step))
    return path


def test_every_evaluation_is_recorded_and_the_best_checkpoint_kept(tmp_path):
    run, out = str(tmp_path / "run"), str(tmp_path / "eval")
    os.makedirs(run)
    os.makedirs(out)
    loop = history.History(out, {"metric": "fid"})
    for step, fid in ((2, 30.0), (4, 20.0), (6, 25.0)):
        loop.record(step, _checkpoint(run, step), "fid5k", {"fid": fid}, "fid")
    best = os.path.join(out, "best")
    # Another writer of the folder (a sidecar after the training loop) starts from the file.
    sidecar = history.History(out, {"metric": "another header"})
    assert sidecar["metric"] == "fid"
    assert [(e["step"], e["fid"], e["protocol"]) for e in sidecar["evaluations"]] == [
        (2, 30.0, "fid5k"), (4, 20.0, "fid5k"), (6, 25.0, "fid5k")]
    assert (sidecar["best"]["step"], sidecar["best"]["checkpoint"]) == (
        4, os.path.join(best, "ckpt-4"))
    assert sorted(os.listdir(best)) == ["ckpt-4.data-00000-of-00001", "ckpt-4.index"]
    # The same step again replaces its entry; a new best replaces best/'s files.
    sidecar.record(6, _checkpoint(run, 6), "fid5k", {"fid": 10.0}, "fid")
    assert [(e["step"], e["fid"]) for e in history.History(out, {})["evaluations"]] == [
        (2, 30.0), (4, 20.0), (6, 10.0)]
    assert sorted(os.listdir(best)) == ["ckpt-6.data-00000-of-00001", "ckpt-6.index"]
    # The first writer reads the file before it writes: nothing of the sidecar's is lost.
    loop.record(8, None, "fid5k", {"fid": 1.0}, "fid")  # no checkpoint: never the best
    final = history.History(out, {})
    assert [e["step"] for e in final["evaluations"]] == [2, 4, 6, 8]
    assert final["best"]["step"] == 6
