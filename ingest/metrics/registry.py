"""The schema registry's series: requests, errors and latency per endpoint; subjects and schemas at scrape time.

:class:`RegistryMetrics` is fed by the WSGI application (``registry_api.py``) once
per request with the endpoint's name (the route names of
:data:`ingest.events.registry_api.ROUTES`: ``register``, ``schema_by_id``...;
``unknown`` for a path no route matches), the HTTP status it answered and the
seconds it took. :class:`RegistryCollector` counts subjects, versions and schemas
in the store when scraped (one listing of the store per scrape).

prometheus_client is imported inside the constructor: with ``metrics.port=-1``
the registry never imports it.
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RegistryMetrics:
    """Request counters of one registry process; registers the store collector too. Thread-safe."""

    def __init__(self, registry, schema_registry) -> None:
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client import Counter, Histogram

        self.requests = Counter("ingest_registry_requests", "HTTP requests, by endpoint", ["endpoint"],
                                registry=registry)
        self.errors = Counter("ingest_registry_request_errors", "Requests answered with an HTTP status >= 400",
                              ["endpoint", "status"], registry=registry)
        self.latency = Histogram("ingest_registry_request_latency_seconds", "Time to answer, by endpoint",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=registry)
        self._children: dict[str, tuple[Any, Any]] = {}
        registry.register(RegistryCollector(schema_registry))

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        pair = self._children.get(endpoint)
        if pair is None:
            pair = self._children.setdefault(endpoint, (self.requests.labels(endpoint), self.latency.labels(endpoint)))
        pair[0].inc()
        pair[1].observe(seconds)
        if status >= 400:
            self.errors.labels(endpoint, str(status)).inc()


class RegistryCollector:
    """Subjects, versions and distinct schemas that are live (not soft-deleted), read from the store."""

    def __init__(self, schema_registry) -> None:
        self.schema_registry = schema_registry

    def describe(self):
        return []

    def collect(self):
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import GaugeMetricFamily

        store = self.schema_registry.store
        subjects = versions = 0
        ids: set[int] = set()
        for subject in store.subjects():
            live = [e for e in store.version_entries(subject).values() if not e.deleted]
            subjects += bool(live)
            versions += len(live)
            ids.update(e.id for e in live)
        for name, doc, value in (
                ("ingest_registry_subjects", "Subjects with at least one live version", subjects),
                ("ingest_registry_schema_versions", "Live versions over every subject", versions),
                ("ingest_registry_schemas", "Distinct schemas (ids) that a live version holds", len(ids))):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
