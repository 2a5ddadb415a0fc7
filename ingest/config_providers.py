"""Secrets in configs: ``${env:NAME}`` and ``${file:PATH}`` / ``${file:PATH:KEY}`` references, and redaction.

A config value may be, or contain, a reference that is replaced when the config is parsed
(:meth:`ingest.config.ConfigDef.parse`, the one place every config passes), so that a
password need not be written into the properties file itself (Kafka's config providers,
KIP-297/KIP-421, with their ``${provider:path:key}`` syntax):

- ``${env:NAME}``: the environment variable ``NAME`` (Kafka's ``EnvVarConfigProvider``);
- ``${file:/path/to/secret}``: the whole file, surrounding blanks and the final newline stripped
  (Kafka's ``DirectoryConfigProvider`` reads one file per secret the same way);
- ``${file:/path/to/file.properties:key}``: the value of ``key`` in a properties file
  (Kafka's ``FileConfigProvider``).

Kafka needs ``config.providers=file,env`` declared first; here both providers are always on
(a value that must hold the text ``${`` literally is not known to exist among the product's
keys). A missing variable, file or key is a :class:`~ingest.errors.ConfigError` naming the
config key and the reference, never a silent empty value.

Redaction: a key is secret when its name ends with ``password``, ``secret``, ``user.info``
(``basic.auth.user.info``), ``sasl.jaas.config`` or ``ssl.keystore.key`` (an inline PEM key),
as Kafka marks its ``PASSWORD`` keys. Their values are shown as ``[hidden]`` (Kafka's text)
by ``ingest config show``, by ``repr`` of a config and by the config lines services log.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from ingest.errors import ConfigError

HIDDEN = "[hidden]"
SECRET_SUFFIXES = ("password", "secret", "user.info", "sasl.jaas.config", "ssl.keystore.key")

_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")


def is_secret(key: str) -> bool:
    """True for keys whose values are never shown (:data:`SECRET_SUFFIXES`)."""
    return key.lower().endswith(SECRET_SUFFIXES)


def redacted(key: str, value: Any) -> Any:
    """``value``, or :data:`HIDDEN` when ``key`` is secret and has a value."""
    return HIDDEN if is_secret(key) and value not in (None, "") else value


def redact(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` with every secret key's value hidden."""
    return {k: redacted(k, v) for k, v in values.items()}


PropertiesParser = Callable[..., Mapping[str, str]]
"""``parse_properties(text, source=...)`` of :mod:`ingest.config` (passed in: config imports this module)."""


def resolve(key: str, value: Any, parse_properties: PropertiesParser) -> Any:
    """``value`` with each ``${env:...}`` / ``${file:...}`` reference replaced (non-strings as they are).

    Raises:
        ConfigError: the variable, file or properties key does not exist (names ``key`` and the reference).
    """
    if not isinstance(value, str) or "${" not in value:
        return value
    return _REFERENCE.sub(lambda m: _lookup(key, m.group(0), m.group(1), m.group(2), parse_properties), value)


def resolve_all(raw: Mapping[str, Any], parse_properties: PropertiesParser) -> dict[str, Any]:
    """Every value of ``raw`` resolved (:func:`resolve`)."""
    return {k: resolve(k, v, parse_properties) for k, v in raw.items()}


def _lookup(key: str, reference: str, provider: str, path: str, parse_properties: PropertiesParser) -> str:
    if provider == "env":
        if path not in os.environ:
            raise ConfigError(f"config key '{key}': {reference}: environment variable {path!r} is not set")
        return os.environ[path]
    file, key_name = _split_file(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config key '{key}': {reference}: cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config key '{key}': {reference}: {file} is not UTF-8 text") from None
    if key_name is None:
        return text.strip()
    values = parse_properties(text, source=file)
    if key_name not in values:
        raise ConfigError(f"config key '{key}': {reference}: {file} has no key {key_name!r}")
    return values[key_name]


def _split_file(path: str) -> tuple[str, str | None]:
    """``/p/f.properties:key`` -> (``/p/f.properties``, ``key``); ``/p/secret`` -> (``/p/secret``, None).

    The key is what follows the last ``:`` when the text before it names an existing file
    (a path may itself hold a ``:``).
    """
    head, sep, tail = path.rpartition(":")
    if sep and head and tail and Path(head).is_file():
        return head, tail
    return path, None
