"""Tests of paragan_tf/eval/: test_<module>.py for each of its modules."""
