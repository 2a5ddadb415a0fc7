#!/usr/bin/env bash
# Install everything the project needs on a fresh machine; idempotent and quick when done.
#   - ZooKeeper (Debian package `zookeeper`) when its jar is missing (needs root)
#   - iproute2 (`ip`, for the replication tests' network namespaces) when missing (needs root)
#   - chromium + chromium-driver (headless browser for tests/audit/test_report_browser.py) when missing (needs root)
#   - rabbitmq-server + activemq (the peers of bench/bench_peers.py and tests/bench/test_bench_peers.py) when missing (needs root)
#   - .venv          : the project + test dependencies (pyspark, pyarrow, fastavro, kazoo, hdfs, crcmod, pytest),
#                      and the C extensions ingest/loader/_cdecode, ingest/records/_crecords built in place
#                      (need gcc; optional)
#   - .venv-airflow  : Apache Airflow + Spark provider, kept apart because the provider's
#                      pyspark-client overwrites pyspark's Python files (see docs/operations.md)
#   - .venv-py27     : Python 2.7 with the real Kafka 0.7 clients (samsa, brod) for tests/kafka07/
#                      (scripts/py27_env.sh; logged and skipped when no 2.7 interpreter exists)
#   - .venv-kafka23  : kafka-python 2.3 for tests/kafka/test_kafka_python23.py (scripts/kafka23_env.sh),
#                      kept apart because .venv's kafka-python 3.0 is the reference of tests/wire
#   - kcat (Debian package) and kafkajs (`npm ci` in tests/kafka/node/, when node is installed):
#                      the other-language Kafka clients of tests/kafka/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
log() { echo "[bootstrap] $*" >&2; }

if [ ! -f /usr/share/java/zookeeper.jar ]; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the Debian zookeeper package"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
    else
        log "WARNING: zookeeper jar missing and not root: ZooKeeper tests will be skipped"
    fi
fi

if ! command -v ip >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the Debian iproute2 package (network namespaces for the partition tests)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
    else
        log "WARNING: 'ip' missing and not root: the network-partition tests will be skipped"
    fi
fi

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the Debian chromium and chromium-driver packages (the HTML report's browser test)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
    else
        log "WARNING: chromium/chromedriver missing and not root: the HTML report's browser test will be skipped"
    fi
fi

if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || [ ! -f /usr/share/activemq/bin/activemq.jar ]; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the Debian rabbitmq-server and activemq packages (the peers of bench/bench_peers.py)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server activemq >/dev/null
    else
        log "WARNING: rabbitmq-server/activemq missing and not root: tests/bench/test_bench_peers.py will be skipped"
    fi
fi

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the Debian valgrind package (instruction counts of bench/bench_produce_path.py --instructions)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        log "WARNING: valgrind missing and not root: bench/bench_produce_path.py --instructions prints CPU time only"
    fi
fi

if ! command -v kcat >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        log "installing the Debian kcat package (the command-line Kafka client of tests/kafka/test_kcat.py)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
    else
        log "WARNING: kcat missing and not root: tests/kafka/test_kcat.py will be skipped"
    fi
fi

# setup.py and the C sources: the editable install builds ingest/loader/_cdecode (the compiled Parquet decoder) and
# ingest/records/_crecords (the compiled record reader) in place
stamp() { sha256sum "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/ingest/loader/_cdecode.c" "$ROOT/ingest/records/_crecords.c" "$ROOT/scripts/bootstrap.sh" | sha256sum | cut -c1-16; }
STAMP=$(stamp)

if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.stamp 2>/dev/null)" != "$STAMP" ]; then
    log "creating .venv and installing the project"
    [ -x .venv/bin/python ] || "$PY" -m venv .venv
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -e ".[test]"
    echo "$STAMP" > .venv/.stamp
fi

if [ "${INGEST_SKIP_AIRFLOW:-0}" != 1 ]; then
    if [ ! -x .venv-airflow/bin/airflow ] || [ "$(cat .venv-airflow/.stamp 2>/dev/null)" != "$STAMP" ]; then
        log "creating .venv-airflow (Apache Airflow + Spark provider)"
        [ -x .venv-airflow/bin/python ] || "$PY" -m venv .venv-airflow
        .venv-airflow/bin/pip install -q --upgrade pip >/dev/null
        .venv-airflow/bin/pip install -q "apache-airflow>=3.0" "apache-airflow-providers-apache-spark>=5.0"
        echo "$STAMP" > .venv-airflow/.stamp
    fi
fi
rc=0
./scripts/py27_env.sh || rc=$?
if [ "$rc" = 3 ]; then
    log "no Python 2.7 interpreter: .venv-py27 not built, the Kafka 0.7 client tests will skip"
elif [ "$rc" != 0 ]; then
    exit "$rc"
fi
./scripts/kafka23_env.sh
if command -v npm >/dev/null 2>&1; then
    if [ ! -f tests/kafka/node/node_modules/.package-lock.json ] \
        || [ tests/kafka/node/package-lock.json -nt tests/kafka/node/node_modules/.package-lock.json ]; then
        log "installing kafkajs (npm ci in tests/kafka/node)"
        (cd tests/kafka/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
else
    log "WARNING: node/npm missing: tests/kafka/test_kafkajs.py will be skipped"
fi
log "ready: $ROOT/.venv ($(.venv/bin/python -c 'import pyspark; print("pyspark", pyspark.__version__)'))"
