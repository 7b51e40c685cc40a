"""Tests of paragan_tf/data/: test_<module>.py for each of its modules."""
