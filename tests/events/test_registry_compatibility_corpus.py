"""The registry's compatibility checker against the Avro specification's verdicts, and the ``avro`` package's.

The corpus (``tests/events/compatibility_corpus.py``) gives each reader/writer pair the
verdict of the specification's resolution rules. Our checker must agree on every pair.
The ``avro`` package's checker (measured for docs/dependencies.md) is held to the same
verdicts; its only misses are aliases written without their namespace, which the
specification resolves relative to the named type's namespace and avro compares raw.
"""
from __future__ import annotations

import json

import avro.schema
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from ingest.events import compatibility
from tests.events.compatibility_corpus import cases

CORPUS = cases()
AVRO_ALIAS_CASES = {"record renamed with alias", "enum renamed with alias"}


def test_the_corpus_covers_every_rule_in_both_verdicts():
    assert len(CORPUS) == 121
    assert len({name for name, *_ in CORPUS}) == len(CORPUS)
    assert sum(1 for *_, ok in CORPUS if ok) == 52
    rules = {p.rule for _, r, w, _ in CORPUS for p in compatibility.can_read(r, w)}
    assert rules == {"READER_FIELD_MISSING_DEFAULT_VALUE", "TYPE_MISMATCH", "MISSING_UNION_BRANCH",
                     "MISSING_ENUM_SYMBOLS", "NAME_MISMATCH", "FIXED_SIZE_MISMATCH"}


@pytest.mark.parametrize("name,reader,writer,compatible", CORPUS, ids=[c[0] for c in CORPUS])
def test_our_checker_gives_the_specification_verdict(name, reader, writer, compatible):
    problems = compatibility.can_read(reader, writer)
    assert (not problems) is compatible, problems


def test_the_avro_package_misses_only_namespace_relative_aliases():
    wrong = set()
    for name, reader, writer, compatible in CORPUS:
        result = ReaderWriterCompatibilityChecker().get_compatibility(
            avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer)))
        if (result.compatibility is SchemaCompatibilityType.compatible) is not compatible:
            wrong.add(name)
    assert wrong <= AVRO_ALIAS_CASES, wrong - AVRO_ALIAS_CASES
