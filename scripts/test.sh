#!/usr/bin/env bash
# The test command: installs what the tests need, then runs the whole suite. Arguments go to pytest:
# ./scripts/test.sh -m "not processes" runs only the tests that start no process (tests/harness/processes.py).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$(pwd)/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
