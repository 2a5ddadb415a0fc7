#!/usr/bin/env bash
# Create .venv-py27: a Python 2.7 virtualenv with the real Kafka 0.7 client libraries that the
# tests in tests/kafka07/ run (pins in tests/kafka07/requirements-py27*.txt; docs/kafka07.md).
# Idempotent: does nothing while the stamp (this script + the pins) is unchanged.
# Exit codes: 0 ready, 3 no Python 2.7 interpreter on this machine (the 0.7 tests then skip and
# say so), anything else a failed install.
# The interpreter: $PYTHON27 if set, else python2.7 on PATH, else pyenv's 2.7.x
# ($PY27_CANDIDATES, a space-separated list, replaces that search).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${INGEST_PY27_VENV:-$ROOT/.venv-py27}
log() { echo "[py27_env] $*" >&2; }

find_py27() {
    local c candidates
    if [ -n "${PY27_CANDIDATES:-}" ]; then
        candidates=($PY27_CANDIDATES)       # an explicit search list (the skip test uses it)
    else
        candidates=("${PYTHON27:-}" "$(command -v python2.7 || true)"
                    "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/2.7*/bin/python
                    /root/.pyenv/versions/2.7*/bin/python)
    fi
    for c in "${candidates[@]}"; do
        if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
            echo "$c"; return 0
        fi
    done
    return 1
}

stamp() { sha256sum "$ROOT/scripts/py27_env.sh" "$ROOT"/tests/kafka07/requirements-py27*.txt | sha256sum | cut -c1-16; }
STAMP=$(stamp)
if [ -z "${PY27_CANDIDATES:-}" ] && [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$STAMP" ]; then
    exit 0
fi
# One builder at a time (two test workers may both find the venv stale): the others wait on the lock,
# then find it built.
exec 9>"$VENV.lock"
flock 9
if [ -z "${PY27_CANDIDATES:-}" ] && [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$STAMP" ]; then
    exit 0
fi
if ! PY27=$(find_py27); then
    log "SKIP: no Python 2.7 interpreter (set PYTHON27, or install pyenv's 2.7.18): the Kafka 0.7 client tests will skip"
    exit 3
fi
log "creating $VENV from $PY27 with the Kafka 0.7 clients"
rm -rf "$VENV"
# Python 2.7 has no venv module: virtualenv 16.7.12 (the last single-file release that runs on
# 2.7, with pip/setuptools wheels inside) is installed into a scratch dir, used once, removed.
TOOL=$(mktemp -d)
trap 'rm -rf "$TOOL"' EXIT
"$PY27" -m pip install -q --disable-pip-version-check --no-warn-script-location --target "$TOOL" "virtualenv==16.7.12" 2>&1 \
    | { grep -v -e DEPRECATION -e "is ignored" || true; } >&2
PYTHONPATH="$TOOL" "$PY27" -m virtualenv -q --no-download "$VENV" >/dev/null
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-warn-script-location)
"${PIP[@]}" -r tests/kafka07/requirements-py27.txt 2>&1 | { grep -v -e DEPRECATION -e "is ignored" || true; } >&2
# zc-zookeeper-static compiles ZooKeeper's 3.4 C client with -Werror; gcc 12 warns about it (format-overflow)
CFLAGS="${CFLAGS:-} -Wno-error" "${PIP[@]}" --no-deps -r tests/kafka07/requirements-py27-nodeps.txt 2>&1 \
    | { grep -v -e DEPRECATION -e "is ignored" || true; } >&2
"$VENV/bin/python" -c 'import samsa.cluster, brod, brod.zk, kazoo.client' 
echo "$STAMP" > "$VENV/.stamp"
log "ready: $VENV ($("$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | grep -v '^-' | tr '\n' ' '))"
