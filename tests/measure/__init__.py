"""Tests of paragan_tf/measure/: test_<module>.py for each of its modules."""
