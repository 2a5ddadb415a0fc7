#!/usr/bin/env bash
# The test command: installs what the tests need, then runs the whole suite. Arguments go to pytest:
# ./scripts/test.sh -m "not processes" runs only the tests that start no process (tests/harness/processes.py).
# Two pytest-xdist workers by default, a test file (or an xdist_group) at a time (tests/harness/xdist_scheduling.py);
# INGEST_TEST_WORKERS=N sets the number, and -n/--numprocesses, --dist or -p no:xdist given here replace the default
# (./scripts/test.sh -n 0 runs in this one process).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$(pwd)/.venv/bin/python"
workers=(-n "${INGEST_TEST_WORKERS:-2}" --dist loadgroup)
prev=
for arg in "$@"; do
    case "$arg" in
        -n|-n[0-9]*|-nauto|-nlogical|--numprocesses|--numprocesses=*|--dist|--dist=*|-pno:xdist) workers=() ;;
        no:xdist) [ "$prev" = -p ] && workers=() ;;
    esac
    prev=$arg
done
exec .venv/bin/python -m pytest "${workers[@]}" "$@"
