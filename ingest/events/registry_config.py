"""The schema registry's config keys: ``ingest registry start --config FILE --set key=value``.

The listening address, store and default compatibility are command-line options
(``--port``, ``--host``, ``--store``/``--zk``, ``--compatibility``); the keys here are
the ones shared with the broker and the mirror (the metrics endpoint).
"""
from __future__ import annotations

from ingest.config import ConfigDef
from ingest.metrics.keys import METRICS_KEYS

REGISTRY_CONFIG = ConfigDef("registry", METRICS_KEYS)
"""Every key ``ingest registry start`` accepts in ``--config`` / ``--set``."""
