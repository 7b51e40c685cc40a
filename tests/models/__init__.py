"""Tests of paragan_tf/models/: test_<module>.py for each of its modules."""
