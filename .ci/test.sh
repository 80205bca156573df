#!/usr/bin/env bash
# The test run: lint, format, types, generated files up to date, then every test layer with
# pytest against Kafka 4.4; then the daemon's integration tests against Kafka 3.9
# (transactions v1). Arguments go to the first pytest run only (and skip the 3.9 run).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PATH="${KTE_CACHE:-$HOME/.cache/kafka-txn-exporter}/bin:$PATH"
KAFKA_COMPAT_VERSION=${KAFKA_COMPAT_VERSION:-3.9.2}

echo "== ruff"; "$VENV/bin/ruff" check .
echo "== ruff format"; "$VENV/bin/ruff" format --check .
echo "== mypy"; "$VENV/bin/mypy"
echo "== generated dashboards and alerts are up to date"
"$VENV/bin/python" -m dashboards.generate --check
"$VENV/bin/python" -m alerts.generate --check

run_pytest() {
  set +e
  "$VENV/bin/python" -m pytest "$@"
  local rc=$?
  set -e
  if [ $rc -eq 5 ]; then
    echo "pytest collected no tests: that is a failure for this project" >&2
    return 1
  fi
  return $rc
}

echo "== pytest"
run_pytest "$@"
if [ $# -eq 0 ]; then
  echo "== pytest: the daemon against Kafka $KAFKA_COMPAT_VERSION (transactions v1)"
  "$VENV/bin/python" -m testbed fetch --kafka-version "$KAFKA_COMPAT_VERSION"
  KAFKA_VERSION="$KAFKA_COMPAT_VERSION" run_pytest tests/integration/test_daemon.py -m "not cluster"
fi
