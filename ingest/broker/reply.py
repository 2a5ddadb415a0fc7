"""What a request handler hands the network layer to write back: byte parts and file regions.

The contract between ``handlers.py`` (which builds replies) and ``processor.py``
(which writes them with ``send`` and ``os.sendfile``); neither imports the other.

Ownership: a :class:`Reply` belongs to the one processor thread that writes
it; its file regions' ``release`` callbacks run exactly once, after the bytes
are sent or when the connection is dropped.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FileRegion:
    """Bytes of an open file to send with ``os.sendfile``; ``release`` runs once sent or dropped."""

    fd: int
    position: int
    length: int
    release: Callable[[], None] | None = None

    def __len__(self) -> int:
        """Its length on the wire (a Kafka response's RECORDS field is sized by it)."""
        return self.length


@dataclass(slots=True)
class Reply:
    """What the dispatcher wants written back: parts in order, then maybe close.

    A *deferred* reply (``Reply.deferred()``) is queued at once, keeping its place
    in the connection's response order, but written only after another thread
    calls :meth:`complete` (an acks=-1 produce waiting for the followers, a
    follower's fetch waiting for data). ``complete`` runs at most once; the
    network layer installs ``on_complete`` to be woken. A deferred reply that
    ``hold`` s its connection (a request served on another thread, which the
    connection's later requests may depend on) stops the network layer from
    dispatching that connection's later requests until it is complete.
    """

    parts: list = field(default_factory=list)     # bytes | FileRegion
    close_after: bool = False
    pending: bool = False
    on_complete: Callable[[], None] | None = None
    accounted: bool = True
    hold: bool = False

    @classmethod
    def deferred(cls, *, hold: bool = False) -> "Reply":
        return cls(pending=True, accounted=False, hold=hold)

    def complete(self, parts: list, close_after: bool = False) -> bool:
        """Fill a deferred reply and wake its connection; False if it was completed already."""
        if not self.pending or self.parts:
            return False
        self.close_after = close_after
        self.parts = parts
        self.pending = False          # after parts: the network thread reads pending, then parts
        wake = self.on_complete
        if wake is not None:
            wake()
        return True

    def release(self) -> None:
        """Run every file region's ``release`` once (idempotent); a failing release is logged, not raised."""
        for part in self.parts:
            if isinstance(part, FileRegion) and part.release is not None:
                rel, part.release = part.release, None
                try:
                    rel()
                except Exception:  # noqa: BLE001 - a release failure must not kill the processor
                    log.exception("releasing a file region failed")
