"""Compaction: merge the small files of audited-complete hours, deduplicated, atomically."""
