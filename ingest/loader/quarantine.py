"""Quarantine: messages that fail their CRC or do not decode are kept aside, not loaded, not lost.

Each task writes its quarantined messages as JSON lines (``topic``, ``broker_id``,
``partition``, ``offset``, ``next_offset``, ``reason``, ``payload_b64``) into
staging; the commit publishes them to
``_ingest/quarantine/<topic>/<topic>.b<broker>.p<partition>.<start>-<end>.jsonl``
together with the data, so a quarantined message is accounted for exactly once.
A run fails (nothing committed) when the quarantined share of its messages is
above ``max.quarantine.ratio``: that many bad messages usually mean a wrong
registry or a broken producer, which an operator should look at first.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from ingest.errors import QuarantineLimitError

if TYPE_CHECKING:  # only for the annotation: a task imports this module and needs none of the state code
    from ingest.loader.state import LoaderState
    from ingest.storage import Storage

QUARANTINE_FORMAT = "jsonl"


@dataclass(frozen=True, slots=True)
class QuarantinedMessage:
    """One message kept aside: where it was in the log, why, and its raw bytes.

    Its line in a quarantine file is a JSON object with sorted keys; the raw bytes go
    in ``payload_b64`` (base64), so a line is self-contained and replayable.
    """

    topic: str
    broker_id: int
    partition: int
    offset: int
    next_offset: int
    reason: str
    payload: bytes

    def describe(self) -> str:
        """``"<topic> b<broker> p<partition> offset <offset>: <reason>"``, as errors name it."""
        return f"{self.topic} b{self.broker_id} p{self.partition} offset {self.offset}: {self.reason}"

    def to_json_line(self) -> str:
        """The file line (with its ``\\n``)."""
        return json.dumps({"topic": self.topic, "broker_id": self.broker_id, "partition": self.partition,
                           "offset": self.offset, "next_offset": self.next_offset, "reason": self.reason,
                           "payload_b64": base64.b64encode(self.payload).decode()}, sort_keys=True) + "\n"

    @classmethod
    def from_json_line(cls, line: str) -> QuarantinedMessage:
        d = json.loads(line)
        return cls(topic=d["topic"], broker_id=d["broker_id"], partition=d["partition"], offset=d["offset"],
                   next_offset=d["next_offset"], reason=d["reason"], payload=base64.b64decode(d["payload_b64"]))


def quarantine_file_bytes(messages: Iterable[QuarantinedMessage]) -> bytes:
    """The content of a quarantine file holding ``messages``, in order."""
    return "".join(m.to_json_line() for m in messages).encode()


def over_limit(quarantined: int, messages: int, max_ratio: float) -> bool:
    """Whether ``quarantined / (messages + quarantined)`` is above ``max_ratio``."""
    total = quarantined + messages
    return bool(total) and quarantined / total > max_ratio


def first_quarantined(storage: Storage, paths: Iterable[str], limit: int = 3) -> list[QuarantinedMessage]:
    """The first ``limit`` messages of the quarantine files at ``paths`` (relative to the destination),
    in the given order; only as many lines are parsed as needed."""
    out: list[QuarantinedMessage] = []
    for path in paths:
        for line in storage.read_bytes(storage.join(path)).decode().splitlines():
            if len(out) >= limit:
                return out
            if line.strip():
                out.append(QuarantinedMessage.from_json_line(line))
    return out


def check_ratio(quarantined: int, messages: int, max_ratio: float, samples: list[str] | None = None) -> None:
    """Raise :class:`QuarantineLimitError` when ``quarantined / (messages + quarantined) > max_ratio``;
    its message ends with the first three of ``samples`` (why messages were quarantined)."""
    total = quarantined + messages
    if over_limit(quarantined, messages, max_ratio):
        hint = ("; first reasons: " + " | ".join(samples[:3])) if samples else ""
        raise QuarantineLimitError(
            f"{quarantined} of {total} messages ({quarantined / total:.2%}) could not be decoded, above "
            f"max.quarantine.ratio={max_ratio}; nothing was committed. Check registry.url and the producers, "
            f"or raise max.quarantine.ratio to load the rest and quarantine these{hint}"
        )


def read_quarantine(state: LoaderState, topic: str | None = None) -> Iterator[QuarantinedMessage]:
    """Every committed quarantined message."""
    for rec in state.files(topic, kind="quarantine"):
        for line in state.storage.read_bytes(state.full_path(rec)).decode().splitlines():
            if line.strip():
                yield QuarantinedMessage.from_json_line(line)
