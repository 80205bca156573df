# The README's commands. Each target does its own set-up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
KAFKA_VERSION ?= 4.4.0

.PHONY: setup test lint demo dashboards alerts bench soak clean

setup:
	bash .ci/setup.sh

test: setup
	bash .ci/test.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

demo: setup
	$(PY) -m testbed.demo

dashboards: setup
	$(PY) -m dashboards.generate

alerts: setup
	$(PY) -m alerts.generate

bench: setup
	$(PY) bench/run.py

# The one-hour soak at 10k partitions, slopes after minute 10 (bench/soak.py --help for
# shorter runs).
soak: setup
	PYTHONPATH=. $(PY) bench/soak.py --partitions 10000 --warmup 10

clean:
	rm -rf $(VENV) build *.egg-info
