# make setup  — idempotent: Debian packages, .venv, editable install (seconds on a second run)
# make test   — setup, lint, then the whole test suite (scripts/test.sh: parallel, then the
#               root/kernel and timing tests one at a time; root tests included when root)
# make demo   — setup, then the showcase
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)
# bytecode caches on, even where the machine sets PYTHONDONTWRITEBYTECODE: setup installs
# with --no-compile, so each module is compiled and cached the first time it is imported
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup test lint demo bench clean

setup:
	@bash scripts/setup.sh

lint: setup
	$(PY) -m ruff check .

test: setup
	$(PY) -m ruff check .
	@bash scripts/test.sh

demo: setup
	@bash scripts/demo.sh

bench: setup
	$(PY) benchmarks/bench_advisor.py

clean:
	rm -rf .venv build *.egg-info .pytest_cache .ruff_cache results
