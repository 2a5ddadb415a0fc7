"""Kafka protocol schemas on the hot paths: kio, kafka-python 3.x's protocol classes, and a struct codec.

Measures, in one run and interleaved, the decode of a Produce request v9 (one topic, one partition, a
record batch of 1 MB and one of 64 KB; header v2 included) and the encode of a Fetch response v12
(header v1, one partition, a 1 MB records field given as bytes and as a memoryview), with:

- ``kio`` (generated from Kafka's message specs; native reader, Python writer);
- ``kafka-python`` 3.x's ``ProduceRequest``/``FetchResponse`` (classes built from the same specs);
- ``struct``: a minimal hand-compiled codec of the same two messages (precomputed ``struct.Struct``,
  records as a memoryview of the received buffer, the response as a list of buffers for ``sendmsg``),
  a stand-in for what a declared wire-layer schema can compile itself to.

Reports microseconds per message (best of the rounds) and whether the records bytes were copied, then
feeds each candidate malformed frames (truncated, a records length past the end, an array count of
2**31-2) and reports the error and the peak memory its decode allocated (``tracemalloc``).

kio and kafka-python 3.x are not dependencies of the project: a candidate that is not importable is
skipped with a message. To include them, put a venv's site-packages on the path:
    python3.11 -m venv /tmp/kio && /tmp/kio/bin/pip install kio==0.6.5 kafka-python==3.0.12
    PYTHONPATH=/tmp/kio/lib/python3.11/site-packages .venv/bin/python bench/bench_kafka_schemas.py
"""
from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import struct
import sys
import time
import tracemalloc

HEADER_V2 = struct.Struct(">hhih")      # api_key, api_version, correlation_id, client_id length
INT16, INT32, INT64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, high watermark, last stable offset, log start offset
TOPIC = "page_views"


class Malformed(ValueError):
    """A frame that does not decode: names what was expected and where."""


# -- the struct codec -----------------------------------------------------------------------------

def _uvarint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise Malformed(f"varint runs past the end of the frame at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise Malformed(f"varint longer than 5 bytes at byte {pos}")


def _put_uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _take(buf, pos: int, n: int, what: str):
    if n < 0 or pos + n > len(buf):
        raise Malformed(f"{what}: {n} bytes at byte {pos}, frame has {len(buf) - pos} left")
    return buf[pos:pos + n], pos + n


def _skip_tags(buf, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        _, pos = _take(buf, pos, size, "tagged field")
    return pos


def struct_decode_produce_v9(frame) -> tuple:
    """(correlation_id, client_id, acks, timeout, [(topic, [(partition, records memoryview)])]); no copy."""
    view = memoryview(frame)
    if len(view) < HEADER_V2.size:
        raise Malformed(f"request header needs {HEADER_V2.size} bytes, frame has {len(view)}")
    _, _, corr, client_len = HEADER_V2.unpack_from(view)
    client, pos = _take(view, HEADER_V2.size, max(client_len, 0), "client id")
    pos = _skip_tags(view, pos)
    txn_len, pos = _uvarint(view, pos)
    _, pos = _take(view, pos, max(txn_len - 1, 0), "transactional id")
    head, pos = _take(view, pos, 6, "acks and timeout")
    acks, timeout = struct.unpack(">hi", head)
    topics = []
    n_topics, pos = _uvarint(view, pos)
    if n_topics - 1 > (len(view) - pos) // 3:  # each topic takes at least 3 bytes
        raise Malformed(f"{n_topics - 1} topics cannot fit in {len(view) - pos} bytes")
    for _ in range(n_topics - 1):
        name_len, pos = _uvarint(view, pos)
        name, pos = _take(view, pos, name_len - 1, "topic name")
        parts = []
        n_parts, pos = _uvarint(view, pos)
        if n_parts - 1 > (len(view) - pos) // 6:  # each partition takes at least 6 bytes
            raise Malformed(f"{n_parts - 1} partitions cannot fit in {len(view) - pos} bytes")
        for _ in range(n_parts - 1):
            index_bytes, pos = _take(view, pos, 4, "partition index")
            size, pos = _uvarint(view, pos)
            records, pos = _take(view, pos, size - 1, "records")
            pos = _skip_tags(view, pos)
            parts.append((INT32.unpack(index_bytes)[0], records))
        pos = _skip_tags(view, pos)
        topics.append((bytes(name).decode(), parts))
    _skip_tags(view, pos)
    return corr, bytes(client).decode(), acks, timeout, topics


def struct_encode_fetch_v12(corr: int, topic: str, partition: int, high_watermark: int, records) -> list:
    """The frame as buffers for ``socket.sendmsg``: the records are not copied."""
    name = topic.encode()
    head = (INT32.pack(corr) + b"\x00"                                  # header v1: no tags
            + struct.pack(">ihi", 0, 0, 0)                              # throttle, error, session id
            + b"\x02" + _put_uvarint(len(name) + 1) + name + b"\x02"    # one topic, one partition
            + PARTITION_HEAD.pack(partition, 0, high_watermark, high_watermark, 0)
            + b"\x01"                                                   # aborted transactions: empty
            + INT32.pack(-1)                                            # preferred read replica
            + _put_uvarint(len(records) + 1))
    tail = b"\x00\x00\x00"  # partition, topic and response tags
    size = len(head) + len(records) + len(tail)
    return [INT32.pack(size) + head, records, tail]


# -- kio ------------------------------------------------------------------------------------------

def kio_codecs():
    from kio.schema.fetch.v12 import response as fetch12
    from kio.schema.produce.v9.request import ProduceRequest
    from kio.schema.errors import ErrorCode
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i32, i32Timedelta, i64

    read_header, read_produce = entity_reader(RequestHeader), entity_reader(ProduceRequest)
    write_header, write_fetch = entity_writer(ResponseHeader), entity_writer(fetch12.FetchResponse)

    def decode(frame):
        header, used = read_header(frame, 0)
        request, _ = read_produce(frame, used)
        return header, request, request.topic_data[0].partition_data[0].records

    def encode(corr, topic, partition, high_watermark, records):
        response = fetch12.FetchResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, session_id=i32(0),
            responses=(fetch12.FetchableTopicResponse(topic=topic, partitions=(fetch12.PartitionData(
                partition_index=i32(partition), error_code=ErrorCode.none, high_watermark=i64(high_watermark),
                last_stable_offset=i64(high_watermark), log_start_offset=i64(0), aborted_transactions=(),
                records=records),)),))
        out = io.BytesIO()
        out.write(b"\x00\x00\x00\x00")
        write_header(out, ResponseHeader(correlation_id=i32(corr)))
        write_fetch(out, response)
        data = out.getbuffer()
        INT32.pack_into(data, 0, len(data) - 4)
        return [data]

    return decode, encode


# -- kafka-python 3.x ----------------------------------------------------------------------------

def kafka_python_codecs():
    import kafka
    if int(kafka.__version__.split(".")[0]) < 3:
        raise ImportError(f"kafka-python {kafka.__version__}: the declared protocol classes came with 3.0")
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.producer import ProduceRequest

    def decode(frame):
        request = ProduceRequest.decode(frame, version=9, header=True)
        return request.header, request, request.topic_data[0].partition_data[0].records

    def encode(corr, topic, partition, high_watermark, records):
        Topic = FetchResponse.FetchableTopicResponse
        response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[Topic(
            topic=topic, partitions=[Topic.PartitionData(
                partition_index=partition, error_code=0, high_watermark=high_watermark,
                last_stable_offset=high_watermark, log_start_offset=0, aborted_transactions=[],
                preferred_read_replica=-1, records=records)])])
        response.API_VERSION = 12  # before the header: setting it after fails for a response header
        response.with_header(correlation_id=corr)
        return [response.encode(header=True, framed=True)]

    return decode, encode


# -- the run --------------------------------------------------------------------------------------

def produce_frame(records: bytes, topics: int = 1, partitions: int = 1, records_len: int | None = None) -> bytes:
    """A Produce request v9 with header v2, as a client sends it (without the 4-byte size).

    ``topics``, ``partitions`` and ``records_len`` override the counts and the length written, to make
    malformed frames that lie about their sizes.
    """
    name = TOPIC.encode()
    size = len(records) if records_len is None else records_len
    return (HEADER_V2.pack(0, 9, 7, 5) + b"bench" + b"\x00"
            + b"\x00" + struct.pack(">hi", 1, 30000)
            + _put_uvarint(topics + 1) + _put_uvarint(len(name) + 1) + name
            + _put_uvarint(partitions + 1) + INT32.pack(0) + _put_uvarint(size + 1) + records + b"\x00"
            + b"\x00" + b"\x00")


def record_batch(size: int) -> bytes:
    """A record batch v2 of about ``size`` bytes (the project's builder), else opaque bytes of that size."""
    try:
        from ingest.records.builder import SimpleRecord, build_batch
    except ImportError:
        return os.urandom(size)
    value = b"v" * 200
    return bytes(build_batch([SimpleRecord(value) for _ in range(size // 210)]))


def check_fetch_response(framed: bytes, records: bytes) -> None:
    """Every candidate's Fetch response decodes with kafka-python's reader, when it is there."""
    try:
        from kafka.protocol.consumer import FetchResponse
    except ImportError:
        return
    response = FetchResponse.decode(framed, version=12, header=True, framed=True)
    assert bytes(response.responses[0].partitions[0].records) == records


def copied(records, frame) -> bool:
    """Whether a decoded records field is a copy rather than a view of the received frame."""
    return not (isinstance(records, memoryview) and records.obj is frame)


def timed(fn, rounds: int, *args) -> float:
    best = float("inf")
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while n < 5 or time.perf_counter() - start < 0.05:
            fn(*args)
            n += 1
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def malformed_frames(records: bytes) -> dict:
    good = produce_frame(records)
    return {"truncated in the records": good[:len(good) // 2],
            "records length 1 GB past the end": produce_frame(records, records_len=1 << 30),
            "topic count 2**31-2": produce_frame(records, topics=(1 << 31) - 2),
            "partition count 2**31-2": produce_frame(records, partitions=(1 << 31) - 2)}


def malformed(name: str, decode, records: bytes) -> list:
    rows = []
    for what, frame in malformed_frames(records).items():
        tracemalloc.start()
        start = time.perf_counter()
        try:
            decode(frame)
            outcome = "no error"
        except Exception as exc:  # what each candidate raises is the result
            outcome = f"{type(exc).__name__}: {str(exc)[:70]}".replace("|", "/")
        took = (time.perf_counter() - start) * 1e3
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append((name, what, outcome, f"{took:.2f} ms", f"{peak / 1e6:.2f} MB"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per case; the best is reported")
    args = parser.parse_args()
    candidates = {"struct": (struct_decode_produce_v9, lambda r: r[4][0][1][0][1], struct_encode_fetch_v12)}
    for name, make in (("kio", kio_codecs), ("kafka-python", kafka_python_codecs)):
        try:
            decode, encode = make()
            candidates[name] = (decode, lambda r: r[2], encode)
        except ImportError as exc:
            print(f"skipped {name}: not importable ({exc})")
    now = datetime.datetime.now(datetime.timezone.utc)
    print(f"{now:%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, Python {platform.python_version()}")
    batches = {"1 MB": record_batch(1 << 20), "64 KB": record_batch(64 << 10)}
    # bytes, as socket.recv returns them: kio refuses a writable buffer (a bytearray filled by recv_into)
    frames = {k: produce_frame(v) for k, v in batches.items()}
    rows = []
    for label, frame in frames.items():
        for name, (decode, records_of, _) in candidates.items():
            records = records_of(decode(frame))
            assert bytes(records) == batches[label], name
            rows.append((f"decode Produce v9, {label} batch", name, timed(decode, args.rounds, frame),
                         "copied" if copied(records, frame) else "view"))
    records = batches["1 MB"]
    for given, value in (("bytes", records), ("memoryview", memoryview(bytearray(records)))):
        for name, (_, _, encode) in candidates.items():
            try:
                out = encode(7, TOPIC, 0, 1000, value)
            except Exception as exc:  # a candidate that refuses the type is a result
                rows.append((f"encode Fetch v12, 1 MB as {given}", name, None, f"refused: {type(exc).__name__}"))
                continue
            joined = b"".join(bytes(b) for b in out)
            assert records in joined, name
            check_fetch_response(joined, records)
            us = timed(encode, args.rounds, 7, TOPIC, 0, 1000, value)
            rows.append((f"encode Fetch v12, 1 MB as {given}", name, us,
                         "not copied (buffer list)" if any(b is value for b in out) else "copied"))
    print(f"\n| case | candidate | us per message | records |\n| --- | --- | --- | --- |")
    for case, name, us, note in rows:
        print(f"| {case} | {name} | {'-' if us is None else f'{us:,.1f}'} | {note} |")
    print("\n| candidate | malformed Produce v9 (64 KB batch) | outcome | time | peak memory |")
    print("| --- | --- | --- | --- | --- |")
    for name, (decode, _, _) in candidates.items():
        for row in malformed(name, decode, batches["64 KB"]):
            print("| " + " | ".join(row) + " |")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
