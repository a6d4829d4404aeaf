# One task runner for the README, CI and developers.
# `make run` runs the demo; `make test` runs every test; `make bench` the benchmarks.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STORE ?= ./rmq-demo-store
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: wheel cluster-readme spark-stream-soak bench-spark-stream bench-latency bench-compare bench-delay bench-recovery bench-sync bench-pool run test lint fmt bench build venv clean rust-test py-test fuzz hostile crash power interop-fixture interop-offsets retention

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

# Every public call under hostile arguments, 400 Hypothesis examples per entry point (make test runs 20).
hostile: build
	HOSTILE_EXAMPLES=400 $(PY) -m pytest -q tests/test_hostile_args.py

# consumerOffset.json against RocketMQ 5.3.1 and 4.9.7 at length: 15 tables per history and version
# (`make test` compares 1).
interop-offsets: build
	RMQ_OFFSET_TABLES=15 $(PY) -m pytest -q -s tests/test_interop_offsets.py

# The kill -9 suite at length (`make test` runs 300 kills of it).
CRASH_KILLS ?= 5000
crash: build
	RMQ_CRASH_KILLS=$(CRASH_KILLS) $(PY) -m pytest -q -s tests/test_kill.py

# The power-loss images at length (`make test` opens 192 of them).
POWER_SEEDS ?= 25
POWER_CUTS ?= 80
POWER_IMAGES ?= 2
power:
	RMQ_POWER_SEEDS=$(POWER_SEEDS) RMQ_POWER_CUTS=$(POWER_CUTS) RMQ_POWER_IMAGES=$(POWER_IMAGES) \
	  cargo test --release --quiet --test power_loss -- --nocapture

# Retention with the cleanup service running, at length: 1200 segments of 64 KiB written over about a minute
# (`make test` writes 300, about 15 s).
RETENTION_SEGMENTS ?= 1200
retention:
	RMQ_RETENTION_SEGMENTS=$(RETENTION_SEGMENTS) cargo test --release --quiet --test retention the_service -- --nocapture

# The wheel clusters install: manylinux2014 (glibc 2.17), linked by zig from PyPI (ziglang) instead of a
# manylinux container, stripped (the release profile); tests/wheel_check.py asks auditwheel and reads the ELF.
WHEEL_DIR := target/wheels
wheel: $(VENV)/.deps
	rm -f $(WHEEL_DIR)/rmq-*.whl
	$(VENV)/bin/maturin build --release --zig --compatibility manylinux2014 --out $(WHEEL_DIR) --quiet
	$(PY) tests/wheel_check.py $(WHEEL_DIR)/rmq-*.whl

# README's "Spark on a cluster" commands run as written with that wheel, against a standalone master and two
# workers on loopback (about 2 minutes; `make test` runs tests/test_readme_cluster.py, which parses them).
cluster-readme: build wheel
	RMQ_WHEEL_DIR=$(WHEEL_DIR) $(PY) -m pytest -q tests/readme_cluster.py

# Two worker processes: most tests wait on child processes, JVMs, fsyncs or Spark, so two halve the wall time
# even on two cores. A module's tests stay in one worker (module fixtures such as the Spark cluster are shared).
PYTEST_WORKERS ?= 2
py-test: build
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=20

test: lint rust-test py-test

lint: build
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --features python -- -D warnings
	$(VENV)/bin/ruff check python tests benches spark_udfs
	$(VENV)/bin/ruff format --check python tests benches spark_udfs
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest rmq._native --allowlist stubtest-allowlist.txt

fmt: $(VENV)/.deps
	cargo fmt
	$(VENV)/bin/ruff format python tests benches spark_udfs
	$(VENV)/bin/ruff check --fix python tests benches spark_udfs

bench: build
	cargo bench --bench commitlog --bench dispatch --bench index --bench get_message --bench columnar --bench sync_flush --bench transient_pool
	$(PY) -m pytest benches -q --benchmark-enable --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

# SYNC_FLUSH group commit against per-put msync, 1/4/16 threads, from Rust and from Python (README figures).
bench-sync: build
	cargo bench --bench sync_flush
	$(PY) -m pytest benches/test_bench_sync_flush.py -q --benchmark-enable --benchmark-only \
	  --benchmark-columns=min,median,mean,ops,rounds

# ASYNC_FLUSH put throughput with and without the transient store pool (README figures).
bench-pool:
	cargo bench --bench transient_pool

# rmq's open against RocketMQ 5.3.1's DefaultMessageStore.load() on a 3.25 GiB store, after a crash and after a
# clean shutdown (benches/recovery_bench.py; needs Java 17 and Maven; drops the page cache when root).
bench-recovery: build
	$(PY) benches/recovery_bench.py

# rmq from Python and Rust against RocketMQ 5.3.1's DefaultMessageStore, side by side: puts (ASYNC and
# SYNC_FLUSH), dispatch, drains, key queries, recovery after kill -9; the machine's limits; SQLite, LMDB,
# persist-queue and litequeue from Python; JSON and PNG charts (benches/compare/run.py; needs Java 17 and
# Maven). COMPARE_ARGS=--quick for a small smoke run, COMPARE_ARGS="--charts-only X.json" to redraw charts.
bench-compare: build
	$(PY) benches/compare/run.py $(COMPARE_ARGS)

# The latency of each single put from Python through segment rolls: percentiles, max, the puts that rolled
# (benches/put_latency.py).
bench-latency: build
	$(PY) benches/put_latency.py

# The streaming source against the batch sources on one store, rows/s with local[2] (benches/spark_stream_bench.py).
bench-spark-stream: build
	$(PY) benches/spark_stream_bench.py

# The streaming exactly-once test at length: a writer rolls small segments for SOAK_SECONDS while the query is
# stopped and restarted from its checkpoint over and over (`make test` runs it for a few seconds).
SOAK_SECONDS ?= 180
spark-stream-soak: build
	RMQ_STREAM_SOAK_SECONDS=$(SOAK_SECONDS) $(PY) -m pytest -q -s --timeout 1800 tests/test_spark_stream.py -k exactly_once

# Lateness of delayed deliveries by the schedule service (p50/p99/max, early and missing counts).
bench-delay: build
	$(PY) benches/delay_lateness.py

# Regenerates the committed store written by Apache RocketMQ and its description (tests/interop/README.md).
HARNESS := tests/interop/harness
FIXTURE := tests/fixtures/rocketmq-5.3.1
interop-fixture:
	mvn -q -B -f $(HARNESS)/pom.xml package dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
	rm -rf $(FIXTURE) && mkdir -p $(FIXTURE)
	java -cp $(HARNESS)/target/classes:$$(cat $(HARNESS)/target/classpath.txt) rmq.harness.Harness write $(FIXTURE)/store >/dev/null
	rm -f $(FIXTURE)/store/lock
	tmp=$$(mktemp -d) && cp -r $(FIXTURE)/store $$tmp/store && \
	  java -cp $(HARNESS)/target/classes:$$(cat $(HARNESS)/target/classpath.txt) rmq.harness.Harness read $$tmp/store $(FIXTURE)/describe.jsonl >/dev/null && \
	  rm -rf $$tmp

clean:
	rm -rf $(VENV) target $(STORE)
