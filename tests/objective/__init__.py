"""Tests of paragan_tf/objective/: test_<module>.py for each of its modules."""
