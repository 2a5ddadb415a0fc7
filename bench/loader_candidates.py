"""Compiled Avro-to-Arrow readers as the loader's decoder: speed, equality and datum boundaries.

    .venv/bin/python bench/bench_loader.py --candidates [--count 100000]

A loader message is one Avro datum behind 5 framing bytes, so a container-file reader
can only be fed by wrapping the bodies into an in-memory Avro object container file
(header + one block of all bodies, codec null). For each real event schema with a
generator (page_view, click: the nested ``header`` record, ``["null", string]``
unions, an enum, strings; service_metric: a map) and the bench event, this script:

- decodes the bodies with the current path (generated row decoder + the Parquet
  writer's Arrow conversion) and with fastavro (dicts + ``Table.from_pylist``), the
  reference content;
- runs every candidate in a child process (it may hang or crash): read the container,
  cast to the loader's Arrow schema, compare with the reference; CPU per row;
- checks datum boundaries and bad input in child processes with a timeout: a body with
  one byte left over (last or middle of the block), a truncated body, a union branch
  index out of range. The loader quarantines each of these; a reader that accepts one,
  drops rows or hangs cannot be used on the runtime path.

Prints the machine, the load average at start and end, and one table per check.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CANDIDATES = ("datafusion", "polars-avro", "jetliner", "duckdb-avro")
TIMEOUT_S = 20


def _container(schema: dict, bodies: list[bytes]) -> bytes:
    from ingest.loader.writers import _bytes, _long

    sync = b"\x5a" * 16
    meta = (_long(2) + _bytes(b"avro.schema") + _bytes(json.dumps(schema).encode()) + _bytes(b"avro.codec")
            + _bytes(b"null") + _long(0))
    data = b"".join(bodies)
    return b"".join([b"Obj\x01", meta, sync, _long(len(bodies)), _long(len(data)), data, sync])


def _read(name: str, path: str):
    """The container at ``path`` as a pyarrow Table, read by candidate ``name``."""
    if name == "datafusion":
        import datafusion

        return datafusion.SessionContext().read_avro(path).to_arrow_table()
    if name == "polars-avro":
        import polars_avro

        return polars_avro.read_avro(path).to_arrow()
    if name == "jetliner":
        import jetliner

        return jetliner.read_avro(path).to_arrow()
    if name == "duckdb-avro":
        import duckdb
        import duckdb_ext  # the duckdb-ext-avro package: the avro extension as a wheel

        con = duckdb.connect(config={"extension_directory": list(duckdb_ext.__path__)[0] + "/extensions"})
        con.load_extension("avro")
        return con.sql(f"SELECT * FROM read_avro('{path}')").fetch_arrow_table()
    raise ValueError(name)


def child(name: str, path: str, schema_path: str, ref_path: str) -> None:
    """In a child process: read, cast, compare; prints one JSON line."""
    import pyarrow as pa

    from ingest.loader.writers import arrow_schema

    schema = json.loads(Path(schema_path).read_text())
    try:
        _read(name, path)  # warm-up (imports, first-call setup)
    except BaseException:  # noqa: BLE001 - reported below by the measured call
        pass
    c0 = time.process_time()
    try:
        table = _read(name, path)
    except BaseException as exc:  # noqa: BLE001 - a Rust panic is a BaseException
        print(json.dumps({"outcome": "refused", "why": f"{type(exc).__name__}: {str(exc)[:120]}"}))
        return
    cpu = time.process_time() - c0
    out = {"outcome": "read", "rows": table.num_rows, "cpu_s": cpu}
    try:
        t0 = time.process_time()
        cast = table.cast(arrow_schema(schema))
        out["cast_cpu_s"] = time.process_time() - t0
    except Exception as exc:  # noqa: BLE001
        out["cast"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        cast = None
    if ref_path:
        with pa.OSFile(ref_path) as f:
            ref = pa.ipc.open_file(f).read_all()
        out["equal"] = cast is not None and cast.equals(ref)
    print(json.dumps(out))


def _run_child(name: str, data: bytes, schema: dict, ref_path: str, work: Path) -> dict:
    path, schema_path = work / f"{name}.avro", work / "schema.json"
    path.write_bytes(data)
    schema_path.write_text(json.dumps(schema))
    try:
        r = subprocess.run([sys.executable, __file__, "--child", name, str(path), str(schema_path), ref_path],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"outcome": f"HANG (killed after {TIMEOUT_S} s)"}
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"outcome": f"crash (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def _records(name: str, n: int) -> tuple[dict, list[dict]]:
    from ingest.events.envelope import HeaderFactory, ProducerIdentity
    from ingest.events.loadgen import EventGenerator
    from ingest.events.schemas import load_schema

    if name == "bench":
        from bench_loader import BENCH_SCHEMA

        schema = BENCH_SCHEMA
        recs = [{"member_id": i % 100_000, "page_key": "profile-view", "body": "x" * 105} for i in range(n)]
    else:
        schema = load_schema(name)
        recs = EventGenerator(name, seed=16).batch(n)
    hf = HeaderFactory(ProducerIdentity.new("bench"))
    for i, r in enumerate(recs):
        r["header"] = hf.next(time_ms=1_795_000_000_000 + 7 * i)
    return schema, recs


def _spoiled(schema: dict, good: list[bytes]) -> dict[str, list[bytes]]:
    import fastavro

    out = {"byte left over, last body": good[:-1] + [good[-1] + b"\x00"],
           "byte left over, middle body": good[:5] + [good[5] + b"\x00"] + good[6:10],
           "truncated middle body": good[:5] + [good[5][:-1]] + good[6:10]}
    names = [f["name"] for f in schema["fields"]]
    unions = [i for i, f in enumerate(schema["fields"]) if isinstance(f["type"], list)]
    if unions:  # the union's branch index byte: after the encoding of the fields before it
        i = unions[0]
        before = {"type": "record", "name": schema["name"], "namespace": schema.get("namespace"),
                  "fields": schema["fields"][:i]}
        rec = next(fastavro.schemaless_reader(io.BytesIO(b), fastavro.parse_schema(schema), None) for b in good[:1])
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(before), {k: rec[k] for k in names[:i]})
        pos = len(buf.getvalue())
        bad = good[0][:pos] + b"\x04" + good[0][pos + 1:]  # branch 2 of a 2-branch union
        out[f"union index out of range ({names[i]})"] = good[:5] + [bad] + good[6:10]
    return out


def main(count: int = 100_000) -> int:
    import fastavro
    import pyarrow as pa

    from ingest.loader.decode import compile_row_layout
    from ingest.loader.writers import ParquetFileWriter, arrow_schema

    load0 = os.getloadavg()
    cpu_model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?")
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"machine: nproc {os.cpu_count()}, {cpu_model}, {mem_gb:.0f} GB RAM; load average at start "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; {count:,} events per schema")
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for dist in ("datafusion", "polars-avro", "jetliner", "duckdb", "duckdb-ext-avro", "fastavro", "pyarrow"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = "not installed"
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
          + f"; pyarrow has an Avro reader: {hasattr(pa, 'avro') or hasattr(__import__('pyarrow.dataset'), 'AvroFileFormat')}")
    rows_out: list[tuple] = []
    bound_out: list[tuple] = []
    with tempfile.TemporaryDirectory(prefix="bench-cand-") as tmp:
        work = Path(tmp)
        for sname in ("page_view", "click", "service_metric", "bench"):
            schema, recs = _records(sname, count)
            parsed = fastavro.parse_schema(schema)
            bodies = []
            for r in recs:
                b = io.BytesIO()
                fastavro.schemaless_writer(b, parsed, r)
                bodies.append(b.getvalue())
            target = arrow_schema(schema)
            c0 = time.process_time()
            dicts = [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in bodies]
            ref = pa.Table.from_pylist(dicts, schema=target)
            fa_cpu = time.process_time() - c0
            ref_path = str(work / "ref.arrow")
            with pa.OSFile(ref_path, "wb") as f, pa.ipc.new_file(f, ref.schema) as w:
                w.write_table(ref)
            rows_out.append((sname, "fastavro + from_pylist (reference)", fa_cpu / count * 1e6, "-", "equal"))
            layout = compile_row_layout(schema, b"\x00\x00\x00\x00\x01")
            if layout is not None:
                framed = [b"\x00\x00\x00\x00\x01" + b for b in bodies]
                writer = ParquetFileWriter(io.BytesIO(), schema, layout=layout)
                c0 = time.process_time()
                rows = list(map(layout.decode, framed))
                flat = pa.array(rows, type=writer._flat).flatten()
                cols = iter(flat)
                from ingest.loader.writers import _column

                table = pa.Table.from_arrays([_column(f.type, cols) for f in target], schema=target)
                cur_cpu = time.process_time() - c0
                rows_out.append((sname, "current: generated decoder + pa.array", cur_cpu / count * 1e6, "-",
                                 "equal" if table.equals(ref) else "DIFFERS"))
            c0 = time.process_time()
            data = _container(schema, bodies)
            build_us = (time.process_time() - c0) / count * 1e6
            for name in CANDIDATES:
                r = _run_child(name, data, schema, ref_path, work)
                if r.get("outcome") != "read":
                    rows_out.append((sname, name, float("nan"), f"{build_us:.2f}", r.get("why", r["outcome"])))
                    continue
                cpu = (r["cpu_s"] + r.get("cast_cpu_s", 0)) / count * 1e6
                verdict = "equal" if r.get("equal") else (r.get("cast") or f"DIFFERS ({r['rows']} rows)")
                rows_out.append((sname, name, cpu, f"{build_us:.2f}", verdict))
            if sname in ("page_view", "click"):
                for case, bad in _spoiled(schema, bodies[:10]).items():
                    for name in CANDIDATES:
                        r = _run_child(name, _container(schema, bad), schema, "", work)
                        if r.get("outcome") == "read":
                            verdict = f"ACCEPTED, {r['rows']} of {len(bad)} rows"
                        else:
                            verdict = r["outcome"] + (f": {r['why']}" if "why" in r else "")
                        bound_out.append((sname, case, name, verdict))
    print(f"\n{'schema':<15} {'decoder':<40} {'us CPU/row':>10} {'+ build':>8}  content vs fastavro")
    for sname, name, cpu, build, verdict in rows_out:
        print(f"{sname:<15} {name:<40} {cpu:>10.2f} {build:>8}  {verdict}")
    print(f"\n{'schema':<11} {'bad input (the loader quarantines it)':<42} {'reader':<12} outcome")
    for sname, case, name, verdict in bound_out:
        print(f"{sname:<11} {case:<42} {name:<12} {verdict[:110]}")
    load1 = os.getloadavg()
    print(f"\nload average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
    else:
        sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
