"""A Kafka topic replica's leader-epoch history: the first offset of every leader epoch (KIP-101).

Each entry says "leader epoch E began at offset O". A leader adds one when it takes a new epoch (at its
log end); a follower adds one when it copies the first batch of a newer epoch (each batch carries its
partition leader epoch). With the history a new follower asks its leader where its own last epoch ends
(OffsetForLeaderEpoch) and truncates exactly there, instead of to a high watermark that may lag
(docs/replication.md, "Kafka topics").

On disk: ``<partition dir>/leader-epoch-checkpoint``, Kafka's file (``LeaderEpochCheckpointFile``)::

    0                 version
    2                 number of entries
    0 0               epoch start offset
    3 1500

rewritten whole (temporary file, fsync, rename) on every change; changes are rare (one per leader change).
Entries beyond the log end are dropped when it is loaded, as Kafka does after recovery.

Thread-safety: every method takes the cache's lock; the leader's request handlers, the replica manager and
a follower's fetcher call it.
"""
from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from pathlib import Path

from ingest.errors import StorageError

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """The ``(epoch, start offset)`` entries of one replica, oldest first (see the module docstring)."""

    def __init__(self, directory: str | Path, log_end: int) -> None:
        self.path = Path(directory) / FILE_NAME
        self._lock = threading.Lock()
        self._entries: list[tuple[int, int]] = _read(self.path)
        kept = [(e, o) for e, o in self._entries if o <= log_end]
        if kept != self._entries:
            self._entries = kept
            self._write()

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    def latest_epoch(self) -> int:
        """The newest epoch, :data:`UNDEFINED_EPOCH` when the history is empty."""
        with self._lock:
            return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch ``epoch`` begins at ``start_offset`` (ignored unless it is newer than the newest entry).

        Raises:
            StorageError: the checkpoint cannot be written.
        """
        with self._lock:
            if self._entries and (epoch <= self._entries[-1][0]):
                return
            # an entry starting at the same offset or later says nothing about a record: Kafka drops it too
            while self._entries and self._entries[-1][1] >= start_offset:
                self._entries.pop()
            self._entries.append((epoch, start_offset))
            self._write()

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """``(epoch', end offset)`` for a requested ``epoch`` as Kafka's ``LeaderEpochFileCache.endOffsetFor``
        answers it: the newest epoch: the log end; an older one: the largest epoch at or below it and the
        start of the epoch after that (KIP-279); one before every entry: itself and the first start;
        nothing known: UNDEFINED."""
        with self._lock:
            es = self._entries
            if epoch == UNDEFINED_EPOCH or not es:
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if epoch == es[-1][0]:
                return epoch, log_end
            epochs = [e for e, _ in es]
            i = bisect_right(epochs, epoch)   # es[i] is the first entry of a newer epoch
            if i >= len(es):
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if i == 0:
                return epoch, es[0][1]
            return es[i - 1][0], es[i][1]

    def truncate_from_end(self, offset: int) -> None:
        """The log was cut back to ``offset``: entries that start at or after it go."""
        with self._lock:
            kept = [(e, o) for e, o in self._entries if o < offset]
            if kept != self._entries:
                self._entries = kept
                self._write()

    def clear(self) -> None:
        """The log restarted empty (a follower below its leader's log start)."""
        with self._lock:
            if self._entries:
                self._entries = []
                self._write()

    def _write(self) -> None:
        text = f"{VERSION}\n{len(self._entries)}\n" + "".join(f"{e} {o}\n" for e, o in self._entries)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            raise StorageError(f"cannot write the leader-epoch checkpoint {self.path}: {exc.strerror}") from exc


def _read(path: Path) -> list[tuple[int, int]]:
    """The entries of a checkpoint file; none when it is absent or unreadable (logged: the replica then
    truncates to its high watermark when it follows, as before leader epochs)."""
    try:
        lines = path.read_text(encoding="ascii").split("\n")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s (%s); starting with no leader-epoch history", path, exc)
        return []
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"version {lines[0]!r}")
        n = int(lines[1])
        out = []
        for line in lines[2:2 + n]:
            e, o = line.split()
            out.append((int(e), int(o)))
        if len(out) != n:
            raise ValueError(f"{n} entries announced, {len(out)} found")
        return out
    except (ValueError, IndexError) as exc:
        log.warning("%s is not a leader-epoch checkpoint (%s); starting with no leader-epoch history", path, exc)
        return []
