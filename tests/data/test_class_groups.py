"""Label groups (data/class_groups.py): contiguous splits of the classes, bad groups refused."""

from __future__ import annotations

import pytest

from paragan_tf.data import class_groups
from paragan_tf.errors import ConfigError


def test_class_groups_split_the_labels_contiguously():
    assert class_groups.classes_for(10) == list(range(10))
    assert class_groups.classes_for(10, group=0, num_groups=3) == [0, 1, 2, 3]
    assert class_groups.classes_for(10, group=2, num_groups=3) == [7, 8, 9]
    groups = [class_groups.classes_for(10, g, 4) for g in range(4)]
    assert sorted(sum(groups, [])) == list(range(10))
    with pytest.raises(ConfigError, match="per_class.group=2 must be in"):
        class_groups.classes_for(10, group=2, num_groups=2)
    with pytest.raises(ConfigError, match="per_class.num_groups=11"):
        class_groups.classes_for(10, group=0, num_groups=11)
