#!/usr/bin/env bash
# The test run: lint, types, generated files up to date, then every test layer with pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PATH="${KTE_CACHE:-$HOME/.cache/kafka-txn-exporter}/bin:$PATH"

echo "== ruff"; "$VENV/bin/ruff" check .
echo "== mypy"; "$VENV/bin/mypy"
echo "== generated dashboards and alerts are up to date"
"$VENV/bin/python" -m dashboards.generate --check
"$VENV/bin/python" -m alerts.generate --check

echo "== pytest"
set +e
"$VENV/bin/python" -m pytest "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: that is a failure for this project" >&2
  exit 1
fi
exit $rc
