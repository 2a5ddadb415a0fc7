"""`ingest log dump`: every message with offset, size, codec, CRC validity; non-zero on corruption."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ingest.broker.log import Log, LogSettings
from ingest.broker.segment import segment_name
from ingest.cli import main
from ingest.records.message import CODEC_GZIP, CODEC_SNAPPY
from ingest.records.message_set import encode_message_set


def make_segment(tmp_path, clock):
    lg = Log(tmp_path / "t-0", LogSettings(flush_interval_messages=1), clock)
    offsets = [lg.append(encode_message_set([b"a" * 20])),
               lg.append(encode_message_set([b"b" * 30, b"c" * 5])),
               lg.append(encode_message_set([b"z" * 100] * 10, CODEC_GZIP)),
               lg.append(encode_message_set([b"s" * 7] * 3, CODEC_SNAPPY))]
    lg.close()
    return tmp_path / "t-0" / segment_name(0), offsets


def test_json_lines_list_every_message(tmp_path, fake_clock, capsys):
    path, offsets = make_segment(tmp_path, fake_clock)
    assert main(["log", "dump", str(path), "--json"]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["offset"] for r in recs] == [offsets[0], offsets[1], offsets[1] + 40, offsets[2], offsets[3]]
    assert [r["codec"] for r in recs] == ["none", "none", "none", "gzip", "snappy"]
    assert all(r["valid"] for r in recs)
    assert [r["size"] for r in recs][:3] == [30, 40, 15]
    assert recs[0]["payload_size"] == 20


def test_deep_lists_inner_messages(tmp_path, fake_clock, capsys):
    path, offsets = make_segment(tmp_path, fake_clock)
    assert main(["log", "dump", str(path), "--json", "--deep"]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    inner = [r for r in recs if r.get("inner")]
    assert len(inner) == 13 and {r["offset"] for r in inner} == {offsets[2], offsets[3]}


def test_corrupt_message_is_reported_and_exit_is_non_zero(tmp_path, fake_clock, capsys):
    path, offsets = make_segment(tmp_path, fake_clock)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 12] ^= 0x01  # payload byte of the second message
    path.write_bytes(bytes(data) + b"\x00\x00\x00\x40\x01")  # and a torn tail
    assert main(["log", "dump", str(path), "--json"]) == 1
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    bad = [r for r in recs if not r["valid"]]
    assert [r["offset"] for r in bad] == [offsets[1], len(data)]
    assert "CRC mismatch" in bad[0]["error"] and "torn tail" in bad[1]["error"]
    assert recs[2]["valid"]  # scanning continues after a CRC mismatch


@pytest.mark.processes
def test_text_output_through_the_console_script(tmp_path, fake_clock):
    path, offsets = make_segment(tmp_path, fake_clock)
    r = subprocess.run([sys.executable, "-m", "ingest.cli", "log", "dump", str(path.parent)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Dumping") and "base offset 0" in lines[0]
    assert lines[1].startswith(f"offset: {offsets[0]} position: 0 size: 30 magic: 2 codec: none crc: 0x")
    assert lines[1].endswith("rule: crc(attributes+payload) payload_size: 20 valid: true")
    assert "5 message(s), 0 invalid" in r.stderr


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main(["log", "dump", str(tmp_path / "nope.kafka")]) == 2
    assert "cannot read segment file" in capsys.readouterr().err


def test_a_wrapper_inflating_past_the_ceiling_is_reported_not_a_traceback(tmp_path, fake_clock, capsys):
    from ingest.records.message_codecs import MAX_INFLATED_SIZE
    from tests.harness.hostile import gzip_bomb_message_set

    path, offsets = make_segment(tmp_path, fake_clock)
    end = path.stat().st_size
    with open(path, "ab") as f:  # a bomb written straight to the file, as a damaged or foreign log may hold
        f.write(gzip_bomb_message_set(MAX_INFLATED_SIZE + 1024 * 1024))
    assert main(["log", "dump", str(path), "--json"]) == 1
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    bomb = [r for r in recs if r["offset"] == end]
    assert len(bomb) == 1 and not bomb[0]["valid"] and str(MAX_INFLATED_SIZE) in bomb[0]["error"]
