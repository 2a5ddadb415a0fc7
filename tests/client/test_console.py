"""The operator tools as an operator runs them: `ingest console-producer | console-consumer | topics`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # the console tools as subprocesses, broker processes

REPO = Path(__file__).resolve().parents[2]


def ingest(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], input=stdin, capture_output=True,
                          env=env, cwd=str(REPO), timeout=timeout)


def test_console_round_trip_with_static_brokers(broker_factory):
    brokers = broker_factory(n=2, num_partitions=2)
    blist = ",".join(b.address for b in brokers)
    lines = [f"line {i} ünïcode".encode() for i in range(50)]
    r = ingest("console-producer", "--brokers", blist, "--topic", "con", stdin=b"\n".join(lines) + b"\n")
    assert r.returncode == 0, r.stderr.decode()
    assert b"50 messages read, 50 acknowledged, 0 failed" in r.stderr
    r = ingest("console-consumer", "--brokers", blist, "--topic", "con", "--from-beginning",
               "--timeout-ms", "1000")
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(r.stdout.splitlines()) == sorted(lines)
    r = ingest("console-consumer", "--brokers", blist, "--topic", "con", "--from-beginning",
               "--max-messages", "3", "--print-offsets")
    assert len(r.stdout.splitlines()) == 3 and r.stdout.startswith(b"con\t")
    r = ingest("topics", "--brokers", blist, "--json")
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert {(x["broker_id"], x["partition"]) for x in rows if x["topic"] == "con"} <= {
        (b.broker_id, p) for b in brokers for p in range(2)}
    assert sum(x["bytes"] for x in rows if x["topic"] == "con") == sum(10 + len(x) for x in lines)
    r = ingest("topics", "--brokers", blist)
    assert r.stdout.decode().splitlines()[0].split() == ["topic", "broker", "partition", "earliest", "latest", "bytes"]


@pytest.mark.slow
def test_console_consumer_group_with_zookeeper_resumes(broker_factory, zk_connect):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2)
    r = ingest("console-producer", "--zk", zk_connect, "--topic", "conz", "--set", "topic.format.default=0.7",
               stdin=b"".join(b"m%d\n" % i for i in range(20)))
    assert r.returncode == 0, r.stderr.decode()
    first = ingest("console-consumer", "--zk", zk_connect, "--topic", "conz", "--group", "ops",
                   "--from-beginning", "--max-messages", "8", "--timeout-ms", "5000")
    assert first.returncode == 0, first.stderr.decode()
    rest = ingest("console-consumer", "--zk", zk_connect, "--topic", "conz", "--group", "ops",
                  "--timeout-ms", "2000")
    got = first.stdout.splitlines() + rest.stdout.splitlines()
    assert len(first.stdout.splitlines()) == 8
    assert sorted(got) == sorted(b"m%d" % i for i in range(20))
    r = ingest("topics", "--zk", zk_connect, "--topic", "conz")
    assert r.returncode == 0 and "conz" in r.stdout.decode()


def test_console_tools_refuse_bad_arguments_clearly():
    r = ingest("console-producer", "--brokers", "nonsense", "--topic", "t", stdin=b"x\n")
    assert r.returncode == 2 and b"broker.list entry 'nonsense' is not id:host:port" in r.stderr
    r = ingest("console-consumer", "--brokers", "0:127.0.0.1:1", "--topic", "t", "--group", "g")
    assert r.returncode == 2 and b"--group needs --zk" in r.stderr
    r = ingest("console-consumer", "--help")
    assert r.returncode == 0 and b"examples:" in r.stdout


def test_topics_exits_2_when_a_broker_is_unreachable_but_still_lists_the_others(broker_factory):
    from tests.harness.net import free_port

    (broker,) = broker_factory(n=1, num_partitions=1)
    r = ingest("console-producer", "--brokers", broker.address, "--topic", "half", stdin=b"x\n")
    assert r.returncode == 0, r.stderr.decode()
    dead = f"{broker.broker_id + 1}:127.0.0.1:{free_port()}"
    r = ingest("topics", "--brokers", f"{broker.address},{dead}", "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)  # docs/operations.md: an unreachable service exits 2
    assert f"broker {dead}: unreachable" in r.stderr.decode()
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["topic"], x["broker_id"], x["bytes"]) for x in rows] == [("half", broker.broker_id, 11)]
    r = ingest("topics", "--brokers", broker.address)
    assert r.returncode == 0 and "half" in r.stdout.decode()
