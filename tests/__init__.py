"""The tests: a folder per package of paragan_tf/ (and benchmarks/); tests/README.md."""
