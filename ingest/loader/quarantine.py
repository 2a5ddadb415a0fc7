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
from typing import Iterator

from ingest.errors import QuarantineLimitError
from ingest.loader.state import LoaderState


def check_ratio(quarantined: int, messages: int, max_ratio: float, samples: list[str] | None = None) -> None:
    """Raise :class:`QuarantineLimitError` when ``quarantined / (messages + quarantined) > max_ratio``."""
    total = quarantined + messages
    if total and quarantined / total > max_ratio:
        hint = ("; first reasons: " + " | ".join(samples[:3])) if samples else ""
        raise QuarantineLimitError(
            f"{quarantined} of {total} messages ({quarantined / total:.2%}) could not be decoded, above "
            f"max.quarantine.ratio={max_ratio}; nothing was committed. Check registry.url and the producers, "
            f"or raise max.quarantine.ratio to load the rest and quarantine these{hint}"
        )


def read_quarantine(state: LoaderState, topic: str | None = None) -> Iterator[dict]:
    """Every committed quarantined message (with ``payload`` decoded to bytes)."""
    for rec in state.files(topic, kind="quarantine"):
        for line in state.storage.read_bytes(state.full_path(rec)).decode().splitlines():
            if line.strip():
                q = json.loads(line)
                q["payload"] = base64.b64decode(q.pop("payload_b64"))
                yield q
