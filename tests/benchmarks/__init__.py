"""Tests of the benchmark suites, benchmarks/*.py: test_<module>.py for each."""
