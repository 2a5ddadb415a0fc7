"""``ingest users add|remove|list`` against a real ZooKeeper: Kafka's stored form, no cleartext, clear refusals."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ingest import znodes
from ingest.wire import scram
from tests.harness.brokers import REPO_ROOT
from tests.harness.sasl import ingest_users

pytestmark = pytest.mark.processes


def _users(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    **(env or {}))
    return subprocess.run([sys.executable, "-m", "ingest.cli", "users", *args], input=stdin, capture_output=True,
                          text=True, env=full_env, cwd=str(REPO_ROOT), timeout=60)


@pytest.fixture
def zk(zk_connect):
    from kazoo.client import KazooClient   # deferred: kazoo is only needed with ZooKeeper

    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def test_add_stores_kafkas_salted_form_and_never_the_password(zk_connect, zk, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("correct horse\n")
    done = _users("add", "a/b", "--zookeeper", zk_connect, "--password-file", str(pw), "--iterations", "8192")
    assert done.returncode == 0, done.stderr
    data, _ = zk.get(znodes.user_path("a/b"))
    assert zk.get_children(znodes.CONFIG_USERS) == ["a%2Fb"]   # the name URL-encoded, as Kafka's Sanitizer
    assert b"correct horse" not in data
    stored = json.loads(data)
    assert stored["version"] == 1 and set(stored["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    for mechanism, text in stored["config"].items():
        assert text.startswith("salt=") and text.endswith(",iterations=8192")
        cred = scram.ScramCredential.from_text(text)
        assert scram.password_matches(mechanism, cred, "correct horse")   # one trailing newline dropped
        assert not scram.password_matches(mechanism, cred, "correct horse\n")
    # a second mechanism-only add keeps the other; the password from standard input
    assert _users("add", "a/b", "--zookeeper", zk_connect, "--mechanism", "SCRAM-SHA-256", "--password-file", "-",
                  stdin="other").returncode == 0
    stored = json.loads(zk.get(znodes.user_path("a/b"))[0])["config"]
    assert scram.password_matches("SCRAM-SHA-256", scram.ScramCredential.from_text(stored["SCRAM-SHA-256"]), "other")
    assert stored["SCRAM-SHA-512"].endswith("iterations=8192")
    listed = _users("list", "--zookeeper", zk_connect, "--json")
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [
        {"user": "a/b", "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}]
    assert "salt" not in listed.stdout
    assert _users("remove", "a/b", "--zookeeper", zk_connect, "--mechanism", "SCRAM-SHA-512").returncode == 0
    assert list(json.loads(zk.get(znodes.user_path("a/b"))[0])["config"]) == ["SCRAM-SHA-256"]
    assert _users("remove", "a/b", "--zookeeper", zk_connect).returncode == 0
    assert zk.exists(znodes.user_path("a/b")) is None
    gone = _users("remove", "a/b", "--zookeeper", zk_connect)
    assert gone.returncode == 2 and "user a/b: no credentials to remove" in gone.stderr


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--iterations", "100", "--password-env", "PW"], {"PW": "x"},
     "--iterations 100 is outside [4096, 16384]"),
    (["--iterations", "４０９６", "--password-env", "PW"], {"PW": "x"}, "is not an integer"),
    (["--password-env", "INGEST_NOT_SET_ANYWHERE"], {}, "--password-env INGEST_NOT_SET_ANYWHERE: that environment "
                                                        "variable is not set"),
    (["--password-env", "PW"], {"PW": ""}, "the password from environment variable PW is empty"),
    (["--password-file", "/nonexistent/pw"], {}, "--password-file /nonexistent/pw: No such file or directory"),
    ([], {}, "one of the arguments --password-file --password-env is required"),
    (["--password", "secret"], {}, "--password is refused: a password on the command line is visible"),
])
def test_add_refuses_bad_input_naming_it_before_touching_zookeeper(args, env, message):
    done = _users("add", "alice", "--zookeeper", "127.0.0.1:1", *args, env=env)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr


def test_list_never_prints_a_credential(zk_connect):
    assert ingest_users("add", "carol", "--zookeeper", zk_connect, password="pw-carol").returncode == 0
    listed = ingest_users("list", "--zookeeper", zk_connect)
    assert listed.stdout == "carol\tSCRAM-SHA-256,SCRAM-SHA-512\n"
