"""Kafka-protocol client tests: a Tansu broker (tests/harness/tansu.py) stands in for a Kafka listener."""
from __future__ import annotations

from tests.harness.tansu import tansu, tansu_own  # noqa: F401  (pytest fixtures)
