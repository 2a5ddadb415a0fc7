#!/usr/bin/env bash
# The README's first command: set everything up, then run the whole pipeline once.
#   ./scripts/demo.sh [ingest demo options, e.g. --duration 20 --workdir /tmp/demo]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$(pwd)/.venv/bin/python"
exec .venv/bin/ingest demo "$@"
