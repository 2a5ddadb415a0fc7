"""Synthetic but realistic activity events for the example schemas (without headers).

Members follow a Zipf-like popularity (a few very active members, a long tail),
pages and elements come from weighted lists, 15 % of page views are guests,
response times are log-normal. Deterministic for a given seed.
"""
from __future__ import annotations

import random
from typing import Callable, Iterator

from ingest.events.schemas import CLICK, PAGE_VIEW, SERVICE_METRIC

PAGES = [("home", 30), ("feed", 25), ("profile-view", 15), ("search", 10), ("jobs", 8),
         ("messaging", 6), ("notifications", 4), ("settings", 1), ("company", 1)]
ELEMENTS = [("nav-home", "LINK"), ("nav-jobs", "LINK"), ("connect", "BUTTON"), ("like", "BUTTON"),
            ("sponsored-1", "AD"), ("see-more", "OTHER"), ("apply", "BUTTON"), ("share", "BUTTON")]
AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/120.0 Mobile Safari/537.36",
]
LOCALES = [("en_US", 50), ("en_GB", 10), ("de_DE", 8), ("fr_FR", 8), ("pt_BR", 8), ("es_ES", 6), ("ja_JP", 5),
           ("nl_NL", 5)]
METRICS = [("http.requests.latency_ms", "ms"), ("http.requests.count", "1"), ("jvm.heap.used_bytes", "bytes"),
           ("db.pool.active", "1"), ("cache.hit_ratio", "ratio")]
HOSTS = [f"app{i:03d}.prod" for i in range(1, 41)]


class EventGenerator:
    """Makes records for one example schema (no ``header``: the producer fills it)."""

    def __init__(self, schema_name: str = PAGE_VIEW, seed: int | None = None, members: int = 1_000_000) -> None:
        makers: dict[str, Callable[[], dict]] = {
            PAGE_VIEW: self.page_view, CLICK: self.click, SERVICE_METRIC: self.service_metric}
        if schema_name not in makers:
            raise ValueError(f"no generator for schema {schema_name!r}; choose one of {', '.join(makers)}")
        self.schema_name = schema_name
        self.make = makers[schema_name]
        self.rng = random.Random(seed)
        self.members = members
        self._pages = [p for p, _ in PAGES]
        self._page_w = [w for _, w in PAGES]
        self._locales = [p for p, _ in LOCALES]
        self._locale_w = [w for _, w in LOCALES]

    def _member(self) -> int:
        # Pareto-distributed rank: member 1 is far more active than member 100000
        return min(self.members, int(self.rng.paretovariate(1.2)))

    def _page(self) -> str:
        return self.rng.choices(self._pages, self._page_w)[0]

    def page_view(self) -> dict:
        guest = self.rng.random() < 0.15
        page = self._page()
        member = 0 if guest else self._member()
        path = f"/in/m{self._member()}" if page == "profile-view" else f"/{page}"
        return {
            "member_id": member,
            "page_key": page,
            "url": f"https://www.example.com{path}",
            "referrer": None if self.rng.random() < 0.4 else f"https://www.example.com/{self._page()}",
            "user_agent": self.rng.choice(AGENTS),
            "ip": f"10.{self.rng.randrange(256)}.{self.rng.randrange(256)}.{self.rng.randrange(1, 255)}",
            "locale": self.rng.choices(self._locales, self._locale_w)[0],
            "response_ms": max(1, int(self.rng.lognormvariate(4.0, 0.6))),
            "is_guest": guest,
        }

    def click(self) -> dict:
        element, kind = self.rng.choice(ELEMENTS)
        return {
            "member_id": self._member(),
            "page_key": self._page(),
            "element_id": element,
            "target_url": None if kind == "BUTTON" else f"https://www.example.com/{self._page()}",
            "position": self.rng.randrange(20),
            "kind": kind,
        }

    def service_metric(self) -> dict:
        metric, unit = self.rng.choice(METRICS)
        value = {"ms": self.rng.lognormvariate(3.0, 0.8), "bytes": self.rng.uniform(2e8, 4e9),
                 "ratio": self.rng.betavariate(9, 1)}.get(unit, float(self.rng.randrange(1000)))
        return {
            "metric": metric,
            "value": value,
            "unit": unit,
            "tags": {"host": self.rng.choice(HOSTS), "dc": self.rng.choice(["east", "west"]), "env": "prod"},
        }

    def __iter__(self) -> Iterator[dict]:
        while True:
            yield self.make()

    def batch(self, n: int) -> list[dict]:
        return [self.make() for _ in range(n)]
