"""Benchmark: this project's compatibility checker against the ``avro`` package's, on one corpus.

Run: ``.venv/bin/python bench/bench_compatibility.py [--rounds N]``.

The corpus is ``tests/events/compatibility_corpus.py``: reader/writer pairs, each with
the verdict of the Avro specification's resolution rules (the existing tests' pairs,
every primitive pair, the page_view evolutions). For each checker it prints how many
verdicts agree with the specification, the pairs where it does not, and the time per
pair from schema text to verdict (the registry holds schema texts):

- ours: ``json.loads`` + ``ingest.events.compatibility.can_read``;
- avro: ``avro.schema.parse`` + ``avro.compatibility.ReaderWriterCompatibilityChecker``
  (a fresh checker per pair: it memoizes by object identity), and its check alone.

Each time is the best of ``--rounds`` interleaved rounds (the machine's 2 cores are shared).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import avro.schema  # noqa: E402
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType  # noqa: E402

from ingest.events import compatibility  # noqa: E402
from tests.events.compatibility_corpus import cases  # noqa: E402


def ours(reader_text: str, writer_text: str) -> bool:
    return not compatibility.can_read(json.loads(reader_text), json.loads(writer_text))


def avro_verdict(reader_text: str, writer_text: str) -> bool:
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(reader_text), avro.schema.parse(writer_text))
    return result.compatibility is SchemaCompatibilityType.compatible


def best_time(fn, pairs: list[tuple[str, str]], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for r, w in pairs:
            fn(r, w)
        best = min(best, time.perf_counter() - t)
    return best / len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    rounds = ap.parse_args().rounds
    corpus = cases()
    texts = [(json.dumps(r), json.dumps(w)) for _, r, w, _ in corpus]
    for label, fn in (("ours", ours), ("avro", avro_verdict)):
        wrong = [name for (name, _, _, expected), (r, w) in zip(corpus, texts) if fn(r, w) != expected]
        print(f"{label}: {len(corpus) - len(wrong)} of {len(corpus)} verdicts agree with the Avro specification")
        for name in wrong:
            print(f"  {label} disagrees: {name}")
    parsed = [(avro.schema.parse(r), avro.schema.parse(w)) for r, w in texts]
    loaded = [(json.loads(r), json.loads(w)) for r, w in texts]
    t_ours = t_ours_check = t_avro = t_avro_check = float("inf")
    for _ in range(rounds):  # interleaved, best of each
        t_ours = min(t_ours, best_time(ours, texts, 1))
        t_ours_check = min(t_ours_check, best_time(compatibility.can_read, loaded, 1))
        t_avro = min(t_avro, best_time(avro_verdict, texts, 1))
        t_avro_check = min(t_avro_check, best_time(
            lambda r, w: ReaderWriterCompatibilityChecker().get_compatibility(r, w), parsed, 1))
    print(f"ours: {t_ours * 1e6:.1f} us per pair (text to verdict), {t_ours_check * 1e6:.1f} us check only")
    print(f"avro: {t_avro * 1e6:.1f} us per pair (text to verdict), {t_avro_check * 1e6:.1f} us check only")
    print(f"ratio avro/ours: {t_avro / t_ours:.1f}x (text to verdict), {t_avro_check / t_ours_check:.1f}x (check only)")


if __name__ == "__main__":
    main()
