"""Tests of paragan_tf/generate/: test_<module>.py for each of its modules."""
