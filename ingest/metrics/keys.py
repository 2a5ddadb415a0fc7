"""The two config keys of a metrics endpoint, the same on the broker, the schema registry and the mirror.

``metrics.port``: -1 (the default) turns the endpoint off; 0 binds any free port,
which the process logs at INFO as ``metrics on http://HOST:PORT/metrics``.
``metrics.host``: the address the endpoint binds, loopback unless set, so that a
metrics port is never reachable from other machines by accident.
"""
from __future__ import annotations

from ingest.config import Int, Key, Str

OFF = -1
"""``metrics.port`` value that turns the endpoint off."""

METRICS_KEYS = (
    Key("metrics.port", Int(OFF, 65535), OFF,
        "TCP port of the Prometheus endpoint http://metrics.host:PORT/metrics (-1 = off, 0 = any free port,"
        " logged at INFO as 'metrics on http://...'); docs/metrics.md lists the series"),
    Key("metrics.host", Str(nonempty=True), "127.0.0.1",
        "address the metrics endpoint binds (loopback by default; 0.0.0.0 exposes it on every interface)"),
)
