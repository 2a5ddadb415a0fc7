"""Random operations against a simple model: appends (plain and compressed), flushes, rolls,
retention, clean and torn restarts. Invariants after every step: exactly the appended
messages in [start_offset, end_offset) read back, in order, with their offsets; flushed
data survives a crash; non-boundaries are refused."""
from __future__ import annotations

import os
import random

import pytest

from ingest.broker.log import Log, LogSettings
from ingest.errors import OffsetOutOfRangeError
from ingest.records.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set

SETTINGS = LogSettings(flush_interval_messages=7, file_size=3000, index_interval=100)


def read_everything(lg: Log) -> list[tuple[int, bytes]]:
    out, off = [], lg.start_offset
    while off < lg.end_offset:
        msgs = list(iter_messages(lg.read_bytes(off, 1500), off))
        if not msgs:  # a message bigger than the fetch: retry larger, like the client
            msgs = list(iter_messages(lg.read_bytes(off, 1 << 20), off))
        out += [(m.offset, m.payload) for m in msgs]
        off = msgs[-1].next_offset
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_match_the_model(tmp_path, fake_clock, seed):
    rnd = random.Random(seed)
    d = tmp_path / "t-0"
    lg = Log(d, SETTINGS, fake_clock)
    appended: list[tuple[int, bytes]] = []  # (offset, payload) of every message ever appended
    for step in range(250):
        op = rnd.random()
        if op < 0.6:
            payloads = [os.urandom(rnd.choice([0, 5, 40, 200, 1200])) for _ in range(rnd.choice([1, 1, 3, 10]))]
            codec = rnd.choice([CODEC_NONE, CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY])
            off = lg.append(encode_message_set(payloads, codec))
            for p in payloads:
                appended.append((off, p))
                if codec == CODEC_NONE:
                    off += 10 + len(p)
        elif op < 0.7:
            lg.flush()
        elif op < 0.75:
            lg.roll()
        elif op < 0.82:
            fake_clock.advance(rnd.randint(1, 3) * 3_600_000)
            cutoff = fake_clock.time_ms() - 2 * 3_600_000
            lg.delete_segments(lambda s: s.last_modified_ms < cutoff)
        elif op < 0.9:
            lg.close()  # clean restart: everything appended survives
            end = lg.end_offset
            lg = Log(d, SETTINGS, fake_clock)
            assert lg.end_offset == end
        else:
            # crash: the unflushed tail is torn at a random byte; the flushed part must survive
            flushed = lg.end_offset
            active = lg._active  # noqa: SLF001 - simulate the dead process's file
            cut = rnd.randint(flushed - active.base_offset, active.size)
            os.truncate(active.path, cut)
            lg = Log(d, SETTINGS, fake_clock)
            assert lg.end_offset >= flushed, (seed, step)
            appended = [(o, p) for o, p in appended if o < lg.end_offset]  # lost with the tail
        start, end = lg.start_offset, lg.end_offset
        expected = [(o, p) for o, p in appended if start <= o < end]
        assert read_everything(lg) == expected, (seed, step)
        boundaries = {o for o, _ in expected} | {end}
        probe = rnd.randint(start, end)
        if probe not in boundaries:
            with pytest.raises(OffsetOutOfRangeError):
                lg.read(probe, 10)
    lg.close()
