"""Tests of paragan_tf/layout/: test_<module>.py for its modules (the candidates, their timing
and the cache are tested through test_tuning.py, which drives them)."""
