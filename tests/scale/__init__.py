"""Tests of paragan_tf/scale/: test_<module>.py for each of its modules."""
