"""The benchmark suites of bin/bench.py, their harnesses and probes (docs/benchmarks.md).

Outside the installed package on purpose: nothing under paragan_tf/ imports from here.
bin/bench.py, benchmarks/probes/ and the tests put the repository root on sys.path.
"""
