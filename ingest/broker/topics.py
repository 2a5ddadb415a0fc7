"""Topic-name validation: the only way a topic name may reach a file path.

A topic name is 1 to 249 characters of ``[A-Za-z0-9._-]`` and not ``.`` or
``..`` (DESIGN.md). Anything else is refused with :class:`InvalidTopicError`;
it is never escaped, normalised or turned into a path.
"""
from __future__ import annotations

import re

from ingest.errors import InvalidTopicError, WrongPartitionError

MAX_TOPIC_LENGTH = 249
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
ALLOWED = "1-249 characters of [A-Za-z0-9._-], not '.' or '..'"


def validate_topic(name: str) -> str:
    """Return ``name`` if it is a valid topic name.

    Raises:
        InvalidTopicError: naming the value and what is allowed.
    """
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(name).__name__} {name!r}; allowed is {ALLOWED}")
    if not _TOPIC.fullmatch(name) or name in (".", ".."):
        shown = name if len(name) <= 60 else name[:60] + f"... ({len(name)} chars)"
        raise InvalidTopicError(f"invalid topic name {shown!r}: allowed is {ALLOWED}")
    return name


def validate_partition(topic: str, partition: int, count: int) -> int:
    """Return ``partition`` if it is in ``[0, count)``; WrongPartitionError otherwise."""
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < count:
        raise WrongPartitionError(
            f"partition {partition!r} of topic {topic!r} is out of range: the topic has {count} partition(s), 0..{count - 1}"
        )
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``, the directory of one partition's log under log.dir."""
    return f"{validate_topic(topic)}-{int(partition)}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """The (topic, partition) of a directory name, or None if it is not one."""
    topic, sep, num = name.rpartition("-")
    if not sep or not num.isdigit() or not num.isascii():
        return None
    try:
        validate_topic(topic)
    except InvalidTopicError:
        return None
    return topic, int(num)
