"""The high-watermark checkpoint: ``<log.dir>/replication-offset-checkpoint`` (Kafka 0.8's file).

Format (text, as Kafka's ``OffsetCheckpoint``)::

    0                  <- version
    2                  <- number of entries
    topic 0 123456     <- topic partition high_watermark
    topic 1 7890

Written atomically (a temporary file, fsync, rename, directory fsync) every
``replica.high.watermark.checkpoint.interval.ms`` and at shutdown; read at start-up
so that a restarted replica knows how much of its log was committed. A missing or
unreadable file means "no checkpoint": every high watermark starts at 0, which is
safe (a follower then compares more of its log with the leader's).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

FILE_NAME = "replication-offset-checkpoint"
VERSION = 0


def read(log_dir: str | Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): high_watermark}``; empty when the file is missing or damaged."""
    path = Path(log_dir) / FILE_NAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("cannot read %s (%s); high watermarks start at 0", path, exc)
        return {}
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"version {lines[0]!r}")
        n = int(lines[1])
        out = {}
        for line in lines[2:2 + n]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        if len(out) != n:
            raise ValueError(f"{len(out)} entries, header says {n}")
        return out
    except (ValueError, IndexError) as exc:
        log.warning("ignoring damaged %s (%s); high watermarks start at 0", path, exc)
        return {}


def write(log_dir: str | Path, hws: dict[tuple[str, int], int]) -> None:
    """Replace the checkpoint with ``hws`` atomically. Raises OSError."""
    path = Path(log_dir) / FILE_NAME
    tmp = path.with_name(FILE_NAME + ".tmp")
    body = [str(VERSION), str(len(hws))] + [f"{t} {p} {o}" for (t, p), o in sorted(hws.items())]
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(body) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
