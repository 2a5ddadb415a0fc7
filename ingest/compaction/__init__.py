"""Compaction: merge the small files of audited-complete hours, deduplicated, atomically.

- ``config``: the ``compaction.*`` keys (``conf/compaction.properties``)
- ``plan``: which hours qualify, from the loader's committed state
- ``audit_gate``: which hours an audit report judged complete
- ``formats``: read, dedupe by ``(header.session, header.seq)``, write near the target size
- ``compact``: merge one hour into staged files; commit every hour with one loader manifest
- ``records``: what each run did, under ``<destination>/_compaction/runs/``
- ``runner``: one run, in process or as Spark tasks (``jobs/compact.py``)
- ``cli``: ``ingest compaction run|status``
"""
