"""The bulk path of a task (a fetch decoded as one chunk, ingest.loader.staging) against the
per-message path it replaced: same files (rows, schema, nulls, order), same quarantine, same
counters and event times, same errors, on valid and bad input.

Input: real event payloads (page views, clicks: the nested header, unions, enums) in message
sets of magic 0/1/2, compressed wrappers, payloads truncated, extended, byte-flipped or framed
with another schema id, CRC failures and broken length fields in the set, sets across hour
boundaries. The per-message path is ``iter_range(chunks=False)`` fed to ``stage_messages``
(each message through the per-message decoder); the bulk path is ``chunks=True``.
"""
from __future__ import annotations

import io
import random

import fastavro
import pyarrow.parquet as pq
import pytest

from ingest.events.envelope import HeaderFactory, ProducerIdentity
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import CLICK, PAGE_VIEW, load_schema
from ingest.events.serde import EventSerializer
from ingest.loader import cdecode, staging, task as task_mod
from ingest.loader.fetch import iter_range
from ingest.loader.plan import TaskRange
from ingest.loader.task import Staged, TaskSettings, close_data_files, counted_before_chunks, stage_messages
from ingest.records.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, HEADER_SIZE, MAGIC_V0, MAGIC_V1, MAGIC_V2
from ingest.records.message_batch import MessageBatch
from ingest.records.message_set import encode_message_set
from ingest.storage import open_storage

HOUR = 3_600_000
T0 = 1_795_000_000_000 // HOUR * HOUR


class _SetConsumer:
    """fetch_raw over one in-memory message set (what a broker would answer, cut at ``size``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def fetch_raw(self, topic, partition, offset, size):
        return self.data[offset:offset + size]


def _payloads(registry_url, name: str, times: list[int], seed: int) -> list[bytes]:
    ser = EventSerializer(RegistryClient(registry_url), f"{name}-chunks-value", load_schema(name))
    hf = HeaderFactory(ProducerIdentity.new("svc"))
    out = []
    for t, record in zip(times, EventGenerator(name, seed=seed).batch(len(times))):
        record["header"] = hf.next(time_ms=t)
        out.append(ser.serialize(record))
    return out


def _spoil(rng: random.Random, p: bytes, other_prefix: bytes) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return p[:rng.randrange(len(p))]  # truncated
    if kind == 1:
        return p + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))  # bytes left over
    if kind == 2:
        i = rng.randrange(5, len(p))
        return p[:i] + bytes([rng.randrange(256)]) + p[i + 1:]  # one byte flipped
    if kind == 3:
        return other_prefix + p[5:]  # framed as another schema
    if kind == 4:
        return b"not an avro event"
    return p[:5]  # framing only


def _stage(data: bytes, fmt: str, registry_url, tmp_path, chunks: bool, tag: str, fetch_size: int,
           decoder: str = "compiled"):
    task = TaskRange("pv", 3, 1, "127.0.0.1", 9, task_id=0, start=0, end=len(data))
    settings = TaskSettings(destination=str(tmp_path / tag), run_id="r", format=fmt, registry_url=registry_url,
                            decoder=decoder)
    storage = open_storage(str(tmp_path / tag))
    assert task_mod.new_decoder(settings).decoder == (decoder if cdecode.available() else "python")
    items = list(iter_range(_SetConsumer(data), "pv", 1, 0, len(data), fetch_size=fetch_size,
                            max_fetch_size=1 << 30, chunks=chunks))
    staged = stage_messages(items, task, settings, storage, task_mod.new_decoder(settings),
                            Staged(task_mod.stage_dir("r", task, 0)))
    files = close_data_files(staged, task, 0, fmt, storage)
    out = []
    for f in files:
        raw = storage.read_bytes(storage.join(f.staging))
        if fmt == "parquet":
            table = pq.read_table(io.BytesIO(raw))
            content = (table.schema, table.to_pylist())
        else:
            content = list(fastavro.reader(io.BytesIO(raw)))
        out.append((f.dt, f.hour, f.schema_id, f.rows, f.min_time_ms, f.max_time_ms, content))
    quarantine = [(q.offset, q.next_offset, q.reason, q.payload) for q in staged.quarantine]
    return out, quarantine, staged.messages, staged.last_time_ms, staged.corrupt_offsets, items


def _both(data, fmt, registry_url, tmp_path, fetch_size=1 << 20, decoder="compiled"):
    a = _stage(data, fmt, registry_url, tmp_path, False, "one", fetch_size, decoder)
    b = _stage(data, fmt, registry_url, tmp_path, True, "bulk", fetch_size, decoder)
    assert a[:5] == b[:5]
    return a, b


@pytest.fixture
def per_message_calls(monkeypatch):
    """How many messages went through the per-message path (the rest took the bulk path)."""
    calls = [0]
    one = staging._Stager.one

    def counted(self, item):
        calls[0] += 1
        return one(self, item)

    monkeypatch.setattr(staging._Stager, "one", counted)
    return calls


@pytest.mark.parametrize("fmt, decoder", [("parquet", "compiled"), ("parquet", "python"), ("avro", "compiled")])
def test_bulk_path_equals_per_message_path_on_valid_and_spoiled_payloads(registry_url, tmp_path, fmt, decoder,
                                                                        per_message_calls):
    """Both column decoders (the C extension's when built, the generated Python one) against the
    per-message path; Avro chunks use the row decoder either way."""
    rng = random.Random(16)
    times = [T0 + HOUR - 400 + 7 * i for i in range(120)]  # crosses an hour boundary
    good = _payloads(registry_url, PAGE_VIEW, times, 1) + _payloads(registry_url, CLICK, times[:40], 2)
    other = good[-1][:5]
    mixed = [_spoil(rng, p, other) if rng.random() < 0.15 else p for p in good[:120]] + good[120:]
    for magic in (MAGIC_V2, MAGIC_V1, MAGIC_V0):
        for payloads in (good, mixed):
            data = encode_message_set(payloads, CODEC_NONE, magic)
            for fetch_size in (1 << 20, 3000):  # whole set in one fetch, or many cut fetches
                per_message_calls[0] = 0
                (files, quarantine, n, *_), (_, _, _, _, _, items) = _both(data, fmt, registry_url, tmp_path,
                                                                          fetch_size, decoder)
                if magic != MAGIC_V0 and fetch_size == 3000 and payloads is good:
                    # the per-message run, then the bulk run: first message of each schema, and
                    # the chunks across the hour boundary or across schemas
                    assert len(payloads) < per_message_calls[0] < len(payloads) * 1.3, per_message_calls
                assert n + len(quarantine) == len(payloads)
                assert sum(f[3] for f in files) == n
                batches = [i for i in items if i.__class__ is MessageBatch]
                assert batches
                # magic 0 (9-byte headers) is read into one compact buffer; magic 1 and 2 in place
                assert all(b.header_size == (0 if magic == MAGIC_V0 else HEADER_SIZE) for b in batches)
            assert payloads is good or quarantine  # the spoiled set really has bad payloads


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_bulk_path_equals_per_message_path_with_compressed_wrappers(registry_url, tmp_path, codec):
    good = _payloads(registry_url, PAGE_VIEW, [T0 + i for i in range(60)], 3)
    data = (encode_message_set(good[:20]) + encode_message_set(good[20:50], codec, MAGIC_V1)
            + encode_message_set(good[50:], codec, MAGIC_V2))
    (files, quarantine, n, *_), _ = _both(data, "parquet", registry_url, tmp_path)
    assert (n, quarantine) == (60, []) and [f[3] for f in files] == [60]


@pytest.mark.parametrize("decoder", ["compiled", "python"])
def test_bulk_path_equals_per_message_path_on_corrupt_message_sets(registry_url, tmp_path, decoder):
    """Flipped bytes anywhere in the set: CRC failures become Corrupt items, broken length
    fields end the task with the same error on both paths."""
    rng = random.Random(7)
    good = _payloads(registry_url, PAGE_VIEW, [T0 + i for i in range(40)], 4)
    clean = encode_message_set(good)
    for _ in range(25):
        data = bytearray(clean)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        data = bytes(data)
        outcomes = []
        for chunks in (False, True):
            try:
                r = _stage(data, "parquet", registry_url, tmp_path, chunks, f"c{int(chunks)}", 2000, decoder)
                outcomes.append(r[:5])
            except Exception as exc:  # noqa: BLE001 - compared below
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1]


def test_chunks_count_messages_before_a_boundary_like_single_messages(registry_url):
    good = _payloads(registry_url, PAGE_VIEW, [T0 + i for i in range(30)], 5)
    data = encode_message_set(good) + encode_message_set(good[:10], CODEC_GZIP, MAGIC_V1)
    sizes = [len(p) + 10 for p in good]
    for boundary in (0, sizes[0], sum(sizes[:17]) + 3, sum(sizes), len(data) - 1, len(data) + 5):
        got = []
        for chunks in (False, True):
            counter = [0]
            items = iter_range(_SetConsumer(data), "pv", 1, 0, len(data), fetch_size=1500, max_fetch_size=1 << 30,
                               chunks=chunks)
            list(counted_before_chunks(items, boundary, counter))
            got.append(counter[0])
        assert got[0] == got[1], boundary
