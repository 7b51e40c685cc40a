"""Tests of paragan_tf/distribute/: test_<module>.py for each of its modules."""
