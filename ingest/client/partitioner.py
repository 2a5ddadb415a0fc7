"""Choosing a partition for a message: stable hash of the key, or random without one.

The producer lists a topic's partitions as ``(broker_id, partition)`` pairs,
sorted, over the live brokers, and asks the partitioner for an index into that
list. The default hash is CRC-32 of the key's UTF-8 bytes: unlike Python's
``hash`` it is the same in every process and run (``PYTHONHASHSEED`` salts str
hashes), so a key always lands on the same partition while the cluster is
unchanged.

A custom partitioner is any class with ``partition(key, num_partitions) -> int``,
named as ``module:Class`` in ``partitioner.class``.
"""
from __future__ import annotations

import importlib
import random
import zlib
from typing import Protocol

from ingest.errors import ConfigError


class Partitioner(Protocol):
    def partition(self, key: bytes | str | None, num_partitions: int) -> int: ...


def key_bytes(key: bytes | str) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def stable_hash(key: bytes | str) -> int:
    """CRC-32 (unsigned) of the key bytes: identical in every process."""
    return zlib.crc32(key_bytes(key))


class DefaultPartitioner:
    """``stable_hash(key) % num_partitions``; uniformly random when key is None.

    Thread-safe (``random.Random`` methods are atomic under the GIL).
    """

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def partition(self, key: bytes | str | None, num_partitions: int) -> int:
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be > 0, got {num_partitions}")
        if key is None:
            return self._random.randrange(num_partitions)
        return stable_hash(key) % num_partitions


def load_partitioner(spec: str | None) -> Partitioner:
    """The default partitioner, or an instance of ``module:Class``.

    Raises:
        ConfigError: the spec is not ``module:Class`` or cannot be imported.
    """
    if not spec:
        return DefaultPartitioner()
    module_name, sep, cls_name = spec.partition(":")
    if not sep or not module_name or not cls_name:
        raise ConfigError(f"partitioner.class {spec!r} is not 'module:Class'")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"partitioner.class {spec!r} cannot be loaded: {exc}") from exc
    obj = cls()
    if not callable(getattr(obj, "partition", None)):
        raise ConfigError(f"partitioner.class {spec!r} has no partition(key, num_partitions) method")
    return obj
