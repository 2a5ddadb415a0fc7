"""Readers running during appends, rolls and retention deletes are never broken."""
from __future__ import annotations

import os
import threading
import time

import pytest

from ingest.broker.log import Log, LogSettings
from ingest.errors import OffsetOutOfRangeError
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set


def test_slice_held_across_deletion_stays_readable(tmp_path, fake_clock):
    lg = Log(tmp_path / "t-0", LogSettings(flush_interval_messages=1, file_size=1000), fake_clock)
    for i in range(15):
        lg.append(encode_message_set([b"%03d" % i * 30]))
    sl = lg.read(0, 1000)
    fd = sl.fileno()
    assert lg.delete_segments(lambda seg: seg.base_offset == 0) == (1, 1000)
    assert not (tmp_path / "t-0" / "00000000000000000000.kafka").exists()
    data = sl.read_bytes()  # unlinked, but our reference keeps the file open
    assert [m.payload for m in iter_messages(data)] == [b"%03d" % i * 30 for i in range(10)]
    assert os.fstat(fd).st_nlink == 0
    sl.release()
    with pytest.raises(OSError):
        os.fstat(fd)  # the last holder closed it
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1000)


def test_concurrent_readers_during_appends_rolls_and_deletes(tmp_path, fake_clock):
    lg = Log(tmp_path / "t-0", LogSettings(flush_interval_messages=1, file_size=4000, index_interval=256), fake_clock)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = [0, 0]

    def payload(i: int) -> bytes:
        return b"%08d" % i * 8

    def reader(k: int) -> None:
        try:
            while not stop.is_set():
                off = lg.start_offset
                while off < lg.end_offset and not stop.is_set():
                    try:
                        with lg.read(off, 2000) as sl:
                            time.sleep(0)  # hold the slice while the writer may roll and delete its segment
                            data = sl.read_bytes()
                    except OffsetOutOfRangeError:
                        break  # deleted under us: start again from the new start offset
                    msgs = list(iter_messages(data, off))
                    assert msgs, (off, len(data))
                    for m in msgs:
                        n = int(m.payload[:8])
                        assert m.payload == payload(n)
                    seen[k] += len(msgs)
                    off = msgs[-1].next_offset
                    time.sleep(0)  # let the writer have the GIL between reads
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(300):  # sets of 10: the writer competes with two readers for the GIL
            lg.append(encode_message_set([payload(10 * i + j) for j in range(10)]))
            if i % 10 == 9:
                keep_from = lg.end_offset - 6000
                lg.delete_segments(lambda seg: seg.end_offset <= keep_from)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors[0]
    assert len(lg.segment_bases()) <= 4
    assert min(seen) > 0


def test_concurrent_appenders_get_distinct_offsets_and_lose_nothing(tmp_path, fake_clock):
    lg = Log(tmp_path / "t-0", LogSettings(flush_interval_messages=50, file_size=10_000), fake_clock)
    results: dict[int, list[int]] = {}

    def writer(w: int) -> None:
        results[w] = [lg.append(encode_message_set([b"w%d-%04d" % (w, i)])) for i in range(500)]

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    lg.flush()
    offsets = sorted(o for r in results.values() for o in r)
    assert len(set(offsets)) == 2000
    got: dict[int, bytes] = {}
    off = lg.start_offset
    while off < lg.end_offset:
        msgs = list(iter_messages(lg.read_bytes(off, 5000), off))
        got.update((m.offset, m.payload) for m in msgs)
        off = msgs[-1].next_offset
    assert sorted(got) == offsets
    for w, offs in results.items():
        assert [got[o] for o in offs] == [b"w%d-%04d" % (w, i) for i in range(500)]  # order kept per writer
    assert len(lg.segment_bases()) >= 2  # and a roll happened under concurrent appends
