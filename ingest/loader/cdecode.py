"""The compiled column decoder: a writer schema as a flat schema program, run by the C extension.

:func:`compiled_columns` turns the schemas :func:`ingest.loader.decode.compile_row_layout` accepts
(records flattened depth-first, primitives, enums, ``["null", T]`` unions) into int32 opcodes
(``OP_*``, one leaf after another; see ``_cdecode.c``) and returns a ``decode_columns(payloads)``
with the generated Python one's contract (one list per leaf, except bytes and string leaves,
which come as one tuple of Arrow buffers each: validity, int32 offsets, data; UTF-8 not yet checked), and a
``ValueError`` on the first payload the Python decoder would refuse (framing, data cut short,
10-byte varints, negative or too long lengths, out-of-range union and enum indexes, a longer
encoding of a branch index, bytes left over). ``tests/loader/test_decode_columns.py`` runs both
decoders over the same randomized corruptions in a child process with a deadline.

The extension is optional: when it is not built (no C compiler at install time, another platform,
a big-endian host) :func:`available` is False, one warning is logged, and the Python decoder runs.
"""
from __future__ import annotations

import logging
import sys
from array import array
from typing import Any, Callable

log = logging.getLogger(__name__)

DECODERS = ("compiled", "python")

OP_NULL, OP_BOOLEAN, OP_INT, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_BYTES, OP_STRING, OP_ENUM, OP_OPTIONAL = range(1, 11)
_LEAF_OPS = {"null": OP_NULL, "boolean": OP_BOOLEAN, "int": OP_INT, "long": OP_LONG, "float": OP_FLOAT,
             "double": OP_DOUBLE, "bytes": OP_BYTES, "string": OP_STRING, "enum": OP_ENUM}

_module: Any = None
_import_error: str | None = None
_warned = False

if sys.byteorder == "little":  # floats and doubles are copied as the host's own (Avro's are little-endian)
    try:
        from ingest.loader import _cdecode as _module
    except ImportError as exc:  # not built: the Python decoder runs
        _import_error = f"{exc}"
else:  # pragma: no cover - no big-endian host here
    _import_error = f"a {sys.byteorder}-endian host"


def available() -> bool:
    """Whether the compiled decoder is importable here."""
    return _module is not None


def choose(decoder: str) -> str:
    """The decoder that runs for the setting ``decoder`` (``compiled`` falls back to ``python`` when the
    extension is missing, with one warning per process)."""
    global _warned
    if decoder not in DECODERS:
        raise ValueError(f"decoder {decoder!r}: allowed {', '.join(DECODERS)}")
    if decoder == "compiled" and _module is None:
        if not _warned:
            _warned = True
            log.warning("the compiled Avro decoder (ingest.loader._cdecode) is not importable (%s): the Python "
                        "decoder runs; rebuild with `.venv/bin/pip install -e .` on a machine with a C compiler",
                        _import_error)
        return "python"
    return decoder


def schema_program(schema: dict, prim: Callable[[Any], str | None]) -> tuple[bytes, int, tuple]:
    """(opcodes as bytes, width, enum symbol tables) of a record schema whose leaves ``prim`` names;
    raises ``ValueError`` naming a field this program cannot express."""
    ops = array("i")
    enums: list[tuple] = []
    width = _record(schema, (), ops, enums, prim, 0)
    return ops.tobytes(), width, tuple(enums)


def _leaf(kind: str, t: Any, col: int, ops: array, enums: list) -> None:
    if kind == "enum":
        enums.append(tuple(t["symbols"]))
        ops.extend((OP_ENUM, col, len(enums) - 1))
    else:
        ops.extend((_LEAF_OPS[kind], col))


def _record(schema: dict, path: tuple, ops: array, enums: list, prim, col: int) -> int:
    for f in schema["fields"]:
        t = f["type"]
        p = path + (f["name"],)
        if isinstance(t, dict) and t.get("type") == "record" and "logicalType" not in t:
            col = _record(t, p, ops, enums, prim, col)
            continue
        kind = prim(t)
        if kind is not None:
            _leaf(kind, t, col, ops, enums)
        elif isinstance(t, list) and len(t) == 2 and "null" in t and prim(t[1 - t.index("null")]) not in (None, "null"):
            other = t[1 - t.index("null")]
            # the branch index as the one zigzag byte of 0 or 1, as the Python decoder reads it
            ops.extend((OP_OPTIONAL, col, 2 * t.index("null"), 2 * t.index(other)))
            _leaf(prim(other), other, col, ops, enums)
        else:
            raise ValueError(f"field {'.'.join(p)} of type {t!r}: the schema program has records, primitives, "
                             f"enums and [null, T] unions only")
        col += 1
    return col


def compiled_columns(schema: dict, prefix: bytes | None, prim: Callable[[Any], str | None]) -> Callable[[Any], list]:
    """``decode_columns(payloads)`` run by the extension for ``schema`` (framed with ``prefix`` when given)."""
    if _module is None:
        raise RuntimeError(f"the compiled decoder is not importable: {_import_error}")
    program, width, enums = schema_program(schema, prim)
    run = _module.decode_columns

    def decode_columns(payloads) -> list:
        return run(program, width, prefix, enums, payloads)

    decode_columns.compiled = True
    return decode_columns
