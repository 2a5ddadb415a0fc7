#!/usr/bin/env bash
# Create .venv-kafka23: a small Python 3 venv with kafka-python 2.3 (pins in
# tests/kafka/requirements-kafka23.txt), the client tests/kafka/test_old_clients.py runs as a
# subprocess. It cannot share .venv, whose kafka-python 3.0 is the reference of tests/wire.
# Idempotent: does nothing while the stamp (this script + the pins) is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
VENV=${INGEST_KAFKA23_VENV:-$ROOT/.venv-kafka23}
log() { echo "[kafka23_env] $*" >&2; }

stamp() { sha256sum "$ROOT/scripts/kafka23_env.sh" "$ROOT/tests/kafka/requirements-kafka23.txt" | sha256sum | cut -c1-16; }
STAMP=$(stamp)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$STAMP" ]; then
    exit 0
fi
# One builder at a time (two test workers may both find the venv stale): the others wait on the lock,
# then find it built.
exec 9>"$VENV.lock"
flock 9
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$STAMP" ]; then
    exit 0
fi
log "creating $VENV with kafka-python 2.3"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r tests/kafka/requirements-kafka23.txt 2>&1 \
    | { grep -v -e DEPRECATION -e "is ignored" || true; } >&2
"$VENV/bin/python" -c 'import kafka, sys; v = kafka.__version__; sys.exit(0 if v.startswith("2.3.") else "kafka-python %s, not 2.3" % v)'
echo "$STAMP" > "$VENV/.stamp"
log "ready: $VENV (kafka-python $("$VENV/bin/python" -c 'import kafka; print(kafka.__version__)'))"
