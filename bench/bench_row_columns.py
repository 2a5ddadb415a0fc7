"""A Parquet chunk through the loader's decoders: rows path, columns path (Python and compiled), same run.

    .venv/bin/python bench/bench_row_columns.py [--rows 100000] [--rounds 5] [--quick]

For each event schema (the loader bench's 200-byte event, page_view, click: nested header,
unions, enums) the same framed payloads are decoded and written to an in-memory Parquet file
(snappy) two ways, alternating, best of ``--rounds``:

- rows: ``RowLayout.decode`` per payload (one tuple per row), then the row group converted as
  one flat struct of the leaves (``pa.array`` over the tuples) and split back into the fields:
  the loader's Parquet path before ``decode_columns``;
- columns: ``RowLayout.decode_columns`` (one list per leaf, no tuple per row, strings as bytes),
  ``writers.column_arrays`` (one ``pa.array`` per leaf; string leaves as binary cast to string,
  which checks the UTF-8), then ``ParquetFileWriter.write_columns``: the loader's path with
  ``decoder=python``;
- compiled: the same with ``decode_columns`` run by the C extension (``ingest.loader._cdecode``):
  the loader's path with ``decoder=compiled``, the default.

"decode" is the decode alone for rows, decode + ``column_arrays`` for columns (what a task
does before a chunk counts as decoded).

Prints CPU microseconds per row (decode alone and decode + write), columns / rows and compiled /
columns; the three files are checked equal first.
"""
from __future__ import annotations

import argparse
import io
import os
import struct
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

PREFIX = b"\x00" + struct.pack(">i", 1)


def _payloads(name: str, n: int) -> tuple[dict, list[bytes]]:
    import fastavro

    from ingest.events.envelope import HeaderFactory, ProducerIdentity
    from ingest.events.loadgen import EventGenerator
    from ingest.events.schemas import load_schema

    def framed(parsed, record) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        return PREFIX + buf.getvalue()

    t0 = 1_795_000_000_000
    if name == "bench event":
        from bench_loader import BENCH_SCHEMA, PAYLOAD_BYTES

        parsed = fastavro.parse_schema(BENCH_SCHEMA)
        session = str(uuid.uuid4())

        def rec(i: int, body: str) -> dict:
            return {"header": {"time": t0 + i * 7, "server": "app001.prod", "service": "bench", "session": session,
                               "seq": i}, "member_id": i % 100_000, "page_key": "profile-view", "body": body}

        pad = PAYLOAD_BYTES - len(framed(parsed, rec(0, "")))
        return BENCH_SCHEMA, [framed(parsed, rec(i, "x" * pad)) for i in range(n)]
    schema = load_schema(name)
    parsed = fastavro.parse_schema(schema)
    hf = HeaderFactory(ProducerIdentity.new("bench"))
    out = []
    for i, record in enumerate(EventGenerator(name, seed=1).batch(n)):
        record["header"] = hf.next(time_ms=t0 + i * 7)
        out.append(framed(parsed, record))
    return schema, out


def _rows_path(layout, schema, payloads, write: bool):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.loader.writers import _column, _leaves, arrow_schema

    rows = list(map(layout.decode, payloads))
    if not write:
        return None
    arrow = arrow_schema(schema)
    flat = pa.struct([pa.field(f"c{i}", f.type, nullable=f.nullable) for i, f in enumerate(_leaves(arrow))])
    columns = iter(pa.array(rows, type=flat).flatten())
    table = pa.Table.from_arrays([_column(f.type, columns) for f in arrow], schema=arrow)
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, arrow, compression="snappy") as w:
        w.write_table(table, row_group_size=len(rows))
    return buf.getvalue()


class _Keep(io.BytesIO):
    def close(self) -> None:  # the writer closes its file; keep the bytes readable
        self.kept = self.getvalue()
        super().close()


def _columns_path(layout, schema, payloads, write: bool):
    from ingest.loader.writers import ParquetFileWriter, column_arrays

    arrays = column_arrays(layout, layout.decode_columns(payloads))  # as a task: strings checked here
    if not write:
        return None
    fo = _Keep()
    w = ParquetFileWriter(fo, schema, "snappy", row_group_rows=len(payloads), layout=layout)
    w.write_columns(arrays, len(payloads))
    w.close()
    return fo.kept


def _best(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2,000 rows, 1 round (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.rounds = 2_000, 1
    import gc

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.loader.decode import compile_row_layout

    print(f"load average at start {os.getloadavg()[0]:.2f}; {args.rows:,} rows, best of {args.rounds}")
    print("| schema | rows decode us/row | columns decode | compiled decode | rows decode+write | columns decode+write "
          "| compiled decode+write | columns / rows (decode+write) | compiled / columns (decode) | compiled / columns "
          "(decode+write) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    gc.disable()  # as in a task (ingest.loader.staging)
    for name in ("bench event", "page_view", "click"):
        schema, payloads = _payloads(name, args.rows)
        layout = compile_row_layout(schema, PREFIX, "python")
        compiled = compile_row_layout(schema, PREFIX, "compiled")
        assert getattr(compiled.decode_columns, "compiled", False), "ingest.loader._cdecode is not built"
        a = pq.read_table(pa.BufferReader(_rows_path(layout, schema, payloads, True)))
        b = pq.read_table(pa.BufferReader(_columns_path(layout, schema, payloads, True)))
        c = pq.read_table(pa.BufferReader(_columns_path(compiled, schema, payloads, True)))
        assert a.equals(b) and a.equals(c), f"{name}: the paths wrote different tables"
        times = {}
        for _ in range(args.rounds):  # alternating, best of each
            for key, fn, lay, write in (("rd", _rows_path, layout, False), ("cd", _columns_path, layout, False),
                                        ("kd", _columns_path, compiled, False), ("rw", _rows_path, layout, True),
                                        ("cw", _columns_path, layout, True), ("kw", _columns_path, compiled, True)):
                t = _best(lambda: fn(lay, schema, payloads, write), 1)
                times[key] = min(times.get(key, t), t)
        us = {k: v / len(payloads) * 1e6 for k, v in times.items()}
        print(f"| {name} | {us['rd']:.2f} | {us['cd']:.2f} | {us['kd']:.2f} | {us['rw']:.2f} | {us['cw']:.2f} | "
              f"{us['kw']:.2f} | {us['cw'] / us['rw']:.3f} | {us['kd'] / us['cd']:.3f} | {us['kw'] / us['cw']:.3f} |")
    gc.enable()
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
