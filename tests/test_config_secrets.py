"""Secrets in configs: ``${env:NAME}``, ``${file:PATH}``, ``${file:PATH:KEY}`` resolved when a config is parsed,
and secret keys shown as ``[hidden]`` (``ingest config show``, ``repr``, error messages)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.config import ConfigDef, Key, Str
from ingest.config_providers import HIDDEN, is_secret
from ingest.errors import ConfigError
from ingest.loader.config import LOADER_CONFIG

REPO = Path(__file__).resolve().parents[1]


def _loader(**keys) -> dict:
    return {"destination": "/tmp/x", "registry.url": "https://registry:8081", **keys}


def test_env_and_file_references_resolve_when_the_config_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("INGEST_TEST_USER_INFO", "alice:from-env")
    whole = tmp_path / "ca-path"
    whole.write_text("  /etc/ssl/registry-ca.pem \n")
    props = tmp_path / "secrets.properties"
    props.write_text("# secrets\nregistry.user.info=bob:from-file\nother=x\n")
    config = LOADER_CONFIG.load(None, _loader(**{
        "basic.auth.user.info": "${env:INGEST_TEST_USER_INFO}",
        "schema.registry.ssl.ca.location": f"${{file:{whole}}}",
        "schema.registry.ssl.key.password": f"${{file:{props}:registry.user.info}}",
        "spark.app.name": "load-${env:INGEST_TEST_USER_INFO}-x"}))
    assert config["basic.auth.user.info"] == "alice:from-env"
    assert config["schema.registry.ssl.ca.location"] == "/etc/ssl/registry-ca.pem"
    assert config["schema.registry.ssl.key.password"] == "bob:from-file"
    assert config["spark.app.name"] == "load-alice:from-env-x"


def test_a_missing_variable_file_or_key_is_a_config_error_naming_the_key_and_the_reference(tmp_path, monkeypatch):
    monkeypatch.delenv("INGEST_TEST_ABSENT", raising=False)
    props = tmp_path / "s.properties"
    props.write_text("a=1\n")
    cases = {
        "${env:INGEST_TEST_ABSENT}": "environment variable 'INGEST_TEST_ABSENT' is not set",
        f"${{file:{tmp_path}/nope}}": f"cannot read {tmp_path}/nope",
        f"${{file:{props}:b}}": f"{props} has no key 'b'",
    }
    for reference, reason in cases.items():
        with pytest.raises(ConfigError) as err:
            LOADER_CONFIG.parse(_loader(**{"basic.auth.user.info": reference}))
        assert f"config key 'basic.auth.user.info': {reference}: {reason}" in str(err.value)


def test_secret_keys_are_hidden_in_repr_and_in_error_messages():
    assert all(is_secret(k) for k in ("basic.auth.user.info", "ssl.key.password", "sasl.jaas.config",
                                      "ssl.keystore.key", "spark.ssl.keyPassword", "client.secret"))
    assert not any(is_secret(k) for k in ("ssl.keystore.location", "registry.url", "authentication.users.file"))
    config = LOADER_CONFIG.parse(_loader(**{"basic.auth.user.info": "alice:s3cret"}))
    assert "s3cret" not in repr(config) and f"'basic.auth.user.info': '{HIDDEN}'" in repr(config)
    assert config.redacted()["basic.auth.user.info"] == HIDDEN and config.redacted()["registry.url"]
    strict = ConfigDef("t", (Key("db.password", Str(pattern="[a-z]+")),))
    with pytest.raises(ConfigError) as err:
        strict.parse({"db.password": "Hunter2"})
    assert "Hunter2" not in str(err.value) and HIDDEN in str(err.value)


def test_with_overrides_does_not_resolve_a_resolved_secret_again(tmp_path, monkeypatch):
    secret = tmp_path / "pw"
    secret.write_text("${env:NOT_A_REFERENCE}\n")  # a password that happens to look like one
    config = LOADER_CONFIG.parse(_loader(**{"basic.auth.user.info": f"${{file:{secret}}}"}))
    assert config.with_overrides({"format": "parquet"})["basic.auth.user.info"] == "${env:NOT_A_REFERENCE}"


@pytest.mark.processes
def test_ingest_config_show_resolves_references_and_hides_secrets(tmp_path):
    conf = tmp_path / "loader.properties"
    conf.write_text("destination=/data/events\nregistry.url=${env:INGEST_TEST_REGISTRY}\n"
                    "basic.auth.credentials.source=USER_INFO\nbasic.auth.user.info=${env:INGEST_TEST_USER_INFO}\n")
    env = dict(os.environ, INGEST_TEST_REGISTRY="https://registry:8081", INGEST_TEST_USER_INFO="loader:pw-xyz",
               PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "config", "show", "--component", "loader",
                          "--config", str(conf), "--set", "schema.registry.ssl.key.password=pw-abc"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "registry.url=https://registry:8081" in lines
    assert f"basic.auth.user.info={HIDDEN}" in lines and f"schema.registry.ssl.key.password={HIDDEN}" in lines
    assert "pw-xyz" not in out.stdout + out.stderr and "pw-abc" not in out.stdout + out.stderr
    missing = subprocess.run([sys.executable, "-m", "ingest.cli", "config", "show", "--component", "loader",
                              "--config", str(conf)], cwd=REPO, env={**env, "INGEST_TEST_USER_INFO": ""},
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 0  # set but empty is a value
    del env["INGEST_TEST_USER_INFO"]
    missing = subprocess.run([sys.executable, "-m", "ingest.cli", "config", "show", "--component", "loader",
                              "--config", str(conf)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert ("config key 'basic.auth.user.info': ${env:INGEST_TEST_USER_INFO}: environment variable "
            "'INGEST_TEST_USER_INFO' is not set") in missing.stderr
