# One task runner for the README, CI and developers.
# `make run` runs the demo; `make test` runs every test; `make bench` the benchmarks.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STORE ?= ./rmq-demo-store
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: run test lint fmt bench build venv clean rust-test py-test fuzz

$(VENV)/.deps: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.deps

# Builds the extension (release) into the venv.
build: $(VENV)/.deps
	$(VENV)/bin/maturin develop --release --quiet

run: build
	$(VENV)/bin/rmq demo --store $(STORE)

rust-test:
	cargo test --quiet

fuzz:
	PROPTEST_CASES=20000 cargo test --release --quiet --test decode_fuzz

py-test: build
	$(PY) -m pytest -q

test: lint rust-test py-test

lint: build
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --features python -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest rmq._native --allowlist stubtest-allowlist.txt

fmt: $(VENV)/.deps
	cargo fmt
	$(VENV)/bin/ruff format python tests benches
	$(VENV)/bin/ruff check --fix python tests benches

bench: build
	cargo bench --bench commitlog --bench dispatch --bench index --bench get_message
	$(PY) -m pytest benches -q --benchmark-enable --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

clean:
	rm -rf $(VENV) target $(STORE)
