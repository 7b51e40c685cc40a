"""The tests: one folder per package of paragan_tf/ (and benchmarks/), as tests/README.md describes."""
