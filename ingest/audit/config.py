"""The audit's configuration keys (``conf/audit.properties``).

The audit reads the loader's ``destination`` (committed files, lost ranges)
and the monitoring events the loader loaded from ``audit.topic`` (and, in a
mirrored deployment, the mirror's tier counts and lost ranges from
``mirror.monitoring.topic`` and ``mirror.lost.topic``); its own file
(``conf/audit.properties``) repeats the loader's ``destination``. Keys starting with ``spark.``
pass through to the SparkSession built by ``jobs/audit.py``.
"""
from __future__ import annotations

from ingest.config import Bool, ConfigDef, Float, Int, Key, Regex, Str

DEFAULT_AUDIT_TOPIC = "audit-monitoring"
DEFAULT_WINDOW_MS = 600_000
DEFAULT_MIRROR_MONITORING_TOPIC = "audit-mirror"
DEFAULT_BROKER_MONITORING_TOPIC = "audit-broker"
"""The brokers' audit.counts.topic default (ingest.broker.kafka.tier_counts_config)."""
DEFAULT_MIRROR_LOST_TOPIC = "audit-mirror-lost"

AUDIT_CONFIG = ConfigDef(
    "audit",
    (
        Key("destination", Str(nonempty=True), doc="the loader's destination URI (local path, file://, webhdfs://, hdfs://)"),
        Key("audit.topic", Str(pattern=r"[A-Za-z0-9._-]{1,249}"), DEFAULT_AUDIT_TOPIC,
            "topic the producers publish monitoring events to (loaded by the loader like any topic)"),
        Key("mirror.monitoring.topic", Str(pattern=r"[A-Za-z0-9._-]{1,249}"), DEFAULT_MIRROR_MONITORING_TOPIC,
            "topic the mirror publishes its tier counts to (source read, target acked; never audited itself)"),
        Key("broker.monitoring.topic", Str(pattern=r"[A-Za-z0-9._-]{1,249}"), DEFAULT_BROKER_MONITORING_TOPIC,
            "topic the brokers publish their broker-tier counts to (audit.counts.topic of the brokers: records appended"
            " from producers per window; never audited itself)"),
        Key("mirror.lost.topic", Str(pattern=r"[A-Za-z0-9._-]{1,249}"), DEFAULT_MIRROR_LOST_TOPIC,
            "topic of the mirror's lost ranges (source data gone before mirroring: retention or missing segments; never "
            "audited itself)"),
        Key("monitoring.driver.read.max.bytes", Int(0), 16 * 1024 * 1024,
            "monitoring files (audit.topic, mirror.monitoring.topic, broker.monitoring.topic) up to this many bytes in"
            " all are read and judged in the driver's Python without a Spark job (the same rules, seconds less per run);"
            " larger ones in Spark; 0: always in Spark"),
        Key("registry.url", Str(), "",
            "schema registry URL (informational: the audit reads decoded files and needs no schema lookups)"),
        Key("threshold", Float(0.0, 1.0), 0.999,
            "a judged window whose completeness (distinct loaded / acknowledged) is below this is a loss"),
        Key("grace.ms", Int(0), 1_800_000,
            "how long after a window ends before it is judged (late data and late monitoring may still arrive)"),
        Key("window.ms", Int(1000), DEFAULT_WINDOW_MS,
            "event-time window size; must equal the producers' monitoring window"),
        Key("window.lookback", Int(0, 100_000), 12,
            "how many windows before the end of the audited range are re-audited each run"),
        Key("future.skew.ms", Int(0), 86_400_000,
            "events stamped later than now + this (or at <= 0) are out of range, counted separately"),
        Key("topics", Regex(), ".*", "regex of topics to audit (the audit topic itself is never audited)"),
        Key("topics.blacklist", Regex(), "", "regex of topics not to audit"),
        Key("report.by.producer", Bool(), False, "also write one row per topic, window and producer server"),
        Key("sample.size", Int(0, 10_000), 20, "missing message ids listed per problem window"),
        Key("counts.driver.max.blocks", Int(0, 100_000_000), 1_000_000,
            "the distinct counts group loaded ids into blocks of 64 consecutive seqs; up to this many blocks are"
            " collected to the driver (about 64 ids each), which then answers the counts, the missing-id sample and"
            " the sessions' topics without reading the files again; more are summed in Spark (the aggregation runs"
            " twice); 0: always in Spark"),
        Key("sample.driver.max.ids", Int(0, 100_000_000), 1_000_000,
            "when the lossy windows' seq ranges hold at most this many ids in all, the missing-id sample takes the"
            " missing ones on the driver: from the collected blocks (counts.driver.max.blocks), else from their"
            " sessions' loaded seqs read again (one scan, no shuffle); larger ones are anti-joined in Spark;"
            " 0: always in Spark"),
        Key("producer.failures.are.loss", Bool(), True,
            "judge messages a producer attempted but could not deliver (count_failed, never loaded) as DATA_LOSS"),
        Key("retention.estimate.slack", Float(0.0, 10.0), 0.0,
            "deprecated, ignored (a warning when set): a lost range whose count is an estimate explains at most "
            "that estimate"),
        Key("history.enabled", Bool(), True, "keep each run's rows as a Parquet revision under <destination>/_audit/"),
        Key("report.docs.url", Str(), "",
            "where the HTML report's docs pointer links (e.g. your docs site's audit page); empty: docs/audit.md "
            "of the source checkout as a file: link, or the report's own status table when there is none"),
    ),
    prefixes=("spark.",),
)
"""Every key the audit accepts; see docs/audit.md."""
