"""The cluster id Metadata answers (v2+): one id per cluster, the same across restarts.

Kafka's form: 16 random bytes in URL-safe base64 without padding (22 characters, ``Uuid.toString``).
With ZooKeeper, the cluster's id lives in ``/cluster/id`` (Kafka's node and JSON,
:mod:`ingest.znodes`), created by the first broker that finds none; without ZooKeeper a broker is its
own cluster and keeps its id in ``<log.dir>/meta.properties`` (``cluster.id=...``, Kafka's file name),
written once, atomically.
"""
from __future__ import annotations

import base64
import logging
import os
import uuid
from pathlib import Path

from ingest import znodes
from ingest.errors import CoordinationError, StorageError

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def local_cluster_id(log_dir: str | Path) -> str:
    """The id in ``<log_dir>/meta.properties``, written there first if absent.

    Raises:
        StorageError: the file cannot be read or written.
    """
    path = Path(log_dir) / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}") from exc
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id" and value.strip():
            return value.strip()
    cid = new_cluster_id()
    tmp = path.with_name(META_PROPERTIES + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"# written by the broker once: the id its Kafka listener answers in Metadata\n"
                    f"version=0\ncluster.id={cid}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror}") from exc
    log.info("new cluster id %s (saved in %s)", cid, path)
    return cid


def zookeeper_cluster_id(client) -> str:
    """The cluster's id from ``/cluster/id``, created with a new id by the first broker that finds none
    (Kafka's ``createOrGetClusterId``). ``client``: a started KazooClient.

    Raises:
        CoordinationError: the node holds no cluster id (written by something else).
        kazoo errors: ZooKeeper failed (at start-up: the broker does not start).
    """
    from kazoo.exceptions import NodeExistsError, NoNodeError   # deferred: kazoo only with ZooKeeper

    while True:
        try:
            data, _ = client.retry(client.get, znodes.CLUSTER_ID)
        except NoNodeError:
            cid = new_cluster_id()
            try:
                client.retry(client.create, znodes.CLUSTER_ID, znodes.cluster_id_value(cid), makepath=True)
                log.info("new cluster id %s (saved in ZooKeeper %s)", cid, znodes.CLUSTER_ID)
                return cid
            except NodeExistsError:
                continue   # another broker was first: read its id
        try:
            return znodes.parse_cluster_id(data)
        except ValueError as exc:
            raise CoordinationError(f"ZooKeeper {znodes.CLUSTER_ID} holds no cluster id ({exc}); it is Kafka's "
                                    "node: delete it only if no Kafka cluster uses this ZooKeeper") from exc
