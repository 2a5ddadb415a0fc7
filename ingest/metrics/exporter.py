"""The metrics endpoint: prometheus_client's HTTP server for one process's own registry, on its own thread.

:func:`new_registry` gives a process its :class:`prometheus_client.CollectorRegistry`
(never the library's global one: two brokers in one test process must not share
series). :func:`start_exporter` serves it with
``prometheus_client.start_http_server(port, addr, registry=...)``: a threading
WSGI server on a daemon thread, one more thread per scrape, so a scrape never
runs on (or blocks) the broker's network threads, the registry's request threads
or the mirror's control loop. What a scrape costs those threads is the GIL for
the time the collectors run (counters are read under their own locks; the
custom collectors read sizes and sets the owners already keep).

prometheus_client is imported inside the functions: a process with
``metrics.port=-1`` never imports it.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from ingest.errors import ConfigError
from ingest.metrics.keys import OFF

log = logging.getLogger(__name__)


def new_registry():
    """A fresh, per-process registry."""
    # deferred: prometheus_client is only imported when metrics are on
    from prometheus_client import CollectorRegistry, disable_created_metrics

    disable_created_metrics()   # no *_created series: counters start at process start, as the docs say
    return CollectorRegistry()


def metrics_enabled(config: Mapping[str, Any]) -> bool:
    """True when ``metrics.port`` is not -1."""
    return config.get("metrics.port", OFF) != OFF


class Exporter:
    """A running endpoint: ``url``, ``host``, ``port`` (the bound one), ``stop()``."""

    def __init__(self, httpd, thread, component: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self.component = component
        self.host, self.port = httpd.server_address[:2]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
        self._httpd = None
        log.info("%s metrics endpoint on port %d stopped", self.component, self.port)


def start_exporter(registry, config: Mapping[str, Any], component: str) -> Exporter | None:
    """Serve ``registry`` on ``metrics.host:metrics.port``; None when ``metrics.port`` is -1.

    Raises:
        ConfigError: the address cannot be bound (port taken, unknown host), naming both keys.
    """
    if not metrics_enabled(config):
        return None
    host, port = config["metrics.host"], config["metrics.port"]
    # deferred: prometheus_client is only imported when metrics are on
    from prometheus_client import start_http_server

    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on metrics.host={host} metrics.port={port}: {exc.strerror or exc}; "
            "allowed is a free port (0 = any free port, -1 = metrics off) on a local address") from exc
    exporter = Exporter(httpd, thread, component)
    log.info("%s metrics on %s", component, exporter.url)
    return exporter
