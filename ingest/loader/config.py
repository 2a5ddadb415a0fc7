"""The loader's configuration keys (``conf/loader.properties``; ``--set key=value`` overrides).

Keys starting with ``spark.`` are passed to the SparkSession builder verbatim.
"""
from __future__ import annotations

from ingest.client.kafka.security import security_keys
from ingest.config import Bool, Choice, ConfigDef, Float, Int, Key, Regex, Str, StrList
from ingest.zk_security import ZK_SECURITY_KEYS
from ingest.registry_client_config import REGISTRY_CLIENT_KEYS

MB = 1024 * 1024

LOADER_CONFIG = ConfigDef(
    "loader",
    (
        Key("destination", Str(nonempty=True), doc="storage URI of the output: /path, file:///path, hdfs://nn:8020/path, webhdfs://nn:9870/path"),
        Key("brokers", StrList(), (), "host:port list of brokers' 0.7 ports (each answers METADATA for itself); or use zk.connect"),
        Key("zk.connect", Str(), None, "ZooKeeper connect string to discover brokers from /brokers/ids (instead of brokers)"),
        Key("bootstrap.servers", StrList(), (),
            "host:port list of Kafka listeners: the Kafka-format topics of the clusters they belong to are loaded, "
            "partitions and leaders from Metadata (beside the 0.7 topics of brokers or zk.connect; either may be empty; "
            "empty with zk.connect: the listeners registered under /brokers/endpoints whose protocol is security.protocol)"),
        *security_keys(whose="the Kafka listeners (discovery and every task; not the 0.7 ports)"),
        Key("zk.connectiontimeout.ms", Int(100, 600_000), 6000, "ZooKeeper connection timeout"),
        *ZK_SECURITY_KEYS,
        Key("topics", Regex(), ".*", "whitelist: topics whose whole name matches this regex are loaded"),
        Key("topics.blacklist", Regex(), "", "topics whose whole name matches this regex are skipped (empty: none)"),
        Key("format", Choice(("avro", "parquet")), "avro", "output file format"),
        Key("registry.url", Str(nonempty=True), doc="schema registry base URL, e.g. http://127.0.0.1:8081"),
        *REGISTRY_CLIENT_KEYS,
        Key("fail.on.data.loss", Bool(), True, "fail the run when unloaded data is gone from a broker: deleted by retention, or missing segments (false: record "
            "it and continue from earliest)"),
        Key("new.partition.start", Choice(("earliest", "latest")), "earliest", "where a partition never loaded before starts"),
        Key("max.bytes.per.task", Int(1024, None), 128 * MB, "split a partition's range into tasks of at most this many bytes (at segment boundaries)"),
        Key("max.bytes.per.run", Int(0, None), 0, "cap on bytes loaded by one run, the rest waits for the next run (0: no cap)"),
        Key("parquet.compression", Choice(("snappy", "zstd", "gzip", "none")), "snappy", "Parquet compression codec"),
        Key("parquet.row.group.rows", Int(1000, None), 131_072, "rows per Parquet row group (bounds a task's memory)"),
        Key("decoder", Choice(("compiled", "python")), "compiled",
            "who decodes a Parquet chunk's Avro payloads into columns: compiled (the C extension ingest.loader._cdecode, "
            "5x less decode CPU than python; python, with one logged warning, when it is not built) or python (the generated "
            "Python decoder); both refuse the same malformed payloads (docs/performance.md)"),
        Key("avro.codec", Choice(("null", "deflate", "snappy")), "snappy", "Avro container block codec"),
        Key("max.quarantine.ratio", Float(0.0, 1.0), 0.01, "fail the run when more than this fraction of a run's messages are undecodable"),
        Key("fetch.size", Int(1024, None), 1 * MB, "bytes per fetch request"),
        Key("max.fetch.size", Int(1024, None), 64 * MB, "largest fetch size the client grows to for one big message"),
        Key("socket.timeout.ms", Int(100, None), 30_000, "broker socket timeout"),
        Key("log.retention.hours", Int(1, None), 168, "the brokers' retention, used by `ingest loader status` to estimate when unloaded data will be deleted"),
        Key("state.checkpoint.interval", Int(0, 1_000_000), 100,
            "every this many commits the committer writes a checkpoint of the loader state and archives the manifests it covers, so reading the state costs the same after a year (0: never; docs/storage.md)"),
        Key("staging.retention.hours", Int(0, None), 6, "staging directories of crashed runs older than this are garbage-collected"),
        Key("task.runner", Choice(("rdd", "datasource")), "rdd",
            "how the job runs its tasks on Spark: rdd (one RDD job, one Python worker per core) or datasource (the ingest_load Python Data Source, whose first use in an application starts three planner processes first: 4-5 s more per run; docs/spark-source.md)"),
        Key("spark.master", Str(), "local[*]", "Spark master when the job is not given one by spark-submit"),
        Key("spark.app.name", Str(), "ingest-load", "Spark application name"),
    ),
    prefixes=("spark.",),
)
