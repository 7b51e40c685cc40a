"""Tests of paragan_tf/train/: test_<module>.py for each of its modules."""
