#!/usr/bin/env bash
# The compiled Avro column decoder (ingest/loader/_cdecode.c) and record reader (ingest/records/_crecords.c)
# under AddressSanitizer, on the same randomized malformed corpus as the suite
# (tests/loader/test_decode_columns.py, the compiled cases, and tests/records/test_compiled_records.py):
# any read or write outside a buffer aborts with ASan's report instead of passing by luck.
#
#   scripts/cdecode_asan.sh            # needs gcc's libasan (Debian: part of gcc)
#
# Builds an ASan copy of the extensions into a temporary copy of ingest/ (the checkout's own build is
# not touched), preloads libasan into the interpreter and runs the tests against that copy.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
LIBASAN=$(gcc -print-file-name=libasan.so)
[ -f "$LIBASAN" ] || { echo "libasan not found (gcc -print-file-name=libasan.so gave $LIBASAN)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/cdecode-asan.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cp -r ingest tests conf setup.py pyproject.toml README.md "$TMP/"
find "$TMP/ingest" -name '*.so' -delete
(cd "$TMP" && CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g -O1" LDFLAGS="-fsanitize=address" \
    "$PY" setup.py -q build_ext --inplace >/dev/null 2>&1)
for so in "$TMP"/ingest/loader/_cdecode*.so "$TMP"/ingest/records/_crecords*.so; do
    nm -D "$so" | grep -q __asan_report || { echo "$so has no ASan instrumentation" >&2; exit 2; }
done
# detect_leaks=0: CPython's own allocations at exit are not this extension's leaks; PYTHONMALLOC=malloc: every
# payload its own malloc block (pymalloc's arenas would hide a read past a small bytes object from ASan)
cd "$TMP" && LD_PRELOAD="$LIBASAN" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 PYTHONMALLOC=malloc PYTHONPATH="$TMP" \
    "$PY" -m pytest -q -p no:cacheprovider tests/loader/test_decode_columns.py tests/records/test_compiled_records.py \
    -k "compiled or program" "$@"
