"""Images (generate/images.py): the grid's layout, and PNGs written where their path says."""

from __future__ import annotations

import numpy as np
import pytest

from paragan_tf.generate import images
from paragan_tf.generate import sampling


def test_grid_layout_and_default_classes():
    tiles = np.stack([np.full((4, 4, 1), v, np.float32) for v in (-1.0, 1.0, 0.0, 1.0)])
    grid = images.grid(tiles, rows=2, pad=1)
    assert grid.shape == (2 * 5 + 1, 2 * 5 + 1, 1)
    assert grid[1, 1, 0] == 0 and grid[1, 6, 0] == 255 and grid[6, 1, 0] == 128
    with pytest.raises(ValueError, match="do not fill 3 rows"):
        images.grid(tiles, rows=3)
    assert sampling.default_classes(4) == [0, 1, 2, 3]
    assert sampling.default_classes(1000) == [0, 111, 222, 333, 444, 555, 666, 777, 888, 999]


def test_write_png_keeps_an_absolute_path_absolute(tmp_path, monkeypatch):
    """The folder of an absolute path was once rebuilt without its leading "/", so the PNG
    landed under the working directory (and failed in a read-only one)."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "out" / "grid.png"
    images.write_png(str(target), np.zeros((2, 2, 1), np.uint8))
    assert target.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    images.write_png("relative/grid.png", np.zeros((2, 2, 3), np.uint8))
    images.write_png("here.png", np.zeros((2, 2, 3), np.uint8))
    assert (tmp_path / "relative" / "grid.png").is_file() and (tmp_path / "here.png").is_file()
