"""Helpers of the metrics tests (no tests here): find a process's metrics URL in its output, scrape, look up.

A process started with ``metrics.port=0`` logs ``... metrics on http://HOST:PORT/metrics``
at INFO; :func:`metrics_url` waits for that line in the process's output.
:func:`scrape` fetches the page over HTTP and parses it with prometheus_client's
own parser (``text_string_to_metric_families``), so the tests read what Prometheus
would read.
"""
from __future__ import annotations

import re
import urllib.request
from typing import Callable

from tests.harness.wait import wait_until

METRICS_LINE = re.compile(r"metrics on (http://([\d.]+):(\d+)/metrics)")


def metrics_url(output: Callable[[], str], timeout: float = 30.0) -> str:
    """The URL the process logged (waits for the line)."""
    match = wait_until(lambda: METRICS_LINE.search(output()), timeout, "the 'metrics on http://...' line")
    return match.group(1)


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of the page: ``(sample name, frozenset of label items) -> value``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode("utf-8")
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float | None:
    """The sample ``name`` with exactly ``labels`` (None when absent)."""
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def series(samples: dict, name: str) -> dict[frozenset, float]:
    """Every sample of ``name``: label set -> value."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


def scrape_until(url: str, predicate: Callable[[dict], bool], what: str, timeout: float = 60.0) -> dict:
    """Scrape until ``predicate(samples)`` holds (state the process samples or learns later); the samples."""
    def attempt():
        samples = scrape(url)
        return samples if predicate(samples) else None
    return wait_until(attempt, timeout, what, interval=0.1)


def undocumented(samples: dict, prefix: str) -> list[str]:
    """Series names of the scrape (``prefix``...) that docs/metrics.md does not name (histogram parts by family)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    names = {re.sub(r"_(bucket|count|sum)$", "", n) if n.endswith(("_bucket", "_count", "_sum")) else n
             for n, _ in samples if n.startswith(prefix)}
    return sorted(n for n in names if f"`{n}`" not in doc)
