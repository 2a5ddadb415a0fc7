"""`ingest log dump` of Kafka-format segments (`<base>.log`): every record batch (offsets, count, codec,
CRC-32C validity, producer fields, timestamps), its records with --deep; a flipped bit makes the batch
invalid, the dump goes on with the next one, and the exit status is 1."""
from __future__ import annotations

import json

from ingest.cli import main
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from tests.broker.kafka_log_support import T, open_log

CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)


def make_log(tmp_path, clock):
    log = open_log(tmp_path / "orders-0", clock)
    for i, codec in enumerate(CODECS):
        log.append(build_batch([SimpleRecord(b"v" * (10 + j), None if j else b"key", (("h", b"1"), ("g", None)),
                                             T + 10 * i + j) for j in range(3)], codec=codec))
    log.close()
    (seg,) = sorted((tmp_path / "orders-0").glob("*.log"))
    return seg


def test_every_batch_and_with_deep_every_record_of_every_codec(tmp_path, fake_clock, capsys):
    seg = make_log(tmp_path, fake_clock)
    assert main(["log", "dump", str(seg.parent), "--json", "--deep"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    batches = [x for x in lines if not x.get("record")]
    assert [(b["base_offset"], b["last_offset"], b["count"], b["codec"], b["valid"]) for b in batches] == \
        [(3 * i, 3 * i + 2, 3, c, True) for i, c in enumerate(["none", "gzip", "snappy", "lz4", "zstd"])]
    assert [b["first_timestamp"] for b in batches] == [T + 10 * i for i in range(5)]
    records = [x for x in lines if x.get("record")]
    assert [r["offset"] for r in records] == list(range(15))
    assert records[0] == {"record": True, "offset": 0, "timestamp": T, "key_size": 3, "value_size": 10,
                          "header_keys": ["h", "g"], "valid": True}
    assert [r["key_size"] for r in records[:3]] == [3, -1, -1]


def test_a_flipped_bit_makes_its_batch_invalid_and_the_dump_goes_on(tmp_path, fake_clock, capsys):
    from ingest.records.batch import iter_batches

    seg = make_log(tmp_path, fake_clock)
    data = bytearray(seg.read_bytes())
    pos, h = list(iter_batches(data))[2]
    data[pos + h.size - 2] ^= 0x10
    seg.write_bytes(bytes(data))
    assert main(["log", "dump", str(seg)]) == 1
    out = capsys.readouterr()
    lines = [ln for ln in out.out.splitlines() if ln.startswith("baseOffset")]
    assert len(lines) == 5 and [("valid: true" in ln) for ln in lines] == [True, True, False, True, True]
    assert "baseOffset: 6 lastOffset: 8 count: 3" in lines[2] and "CRC" in lines[2], lines[2]
    assert "5 batch(es), 1 invalid, in 1 file(s)" in out.err


def test_a_torn_tail_is_reported(tmp_path, fake_clock, capsys):
    seg = make_log(tmp_path, fake_clock)
    seg.write_bytes(seg.read_bytes()[:-7])
    assert main(["log", "dump", str(seg), "--json"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 5 and lines[-1]["valid"] is False and lines[-1]["error"].startswith("torn tail")
