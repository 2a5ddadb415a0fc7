"""How a registry client authenticates: Confluent's client keys, and the picklable settings built from them.

Every component that talks to the registry (loader, Spark source, mirror, event producer, and the
broker's tier counts) takes these keys beside its registry URL, with the names of Confluent's serializer settings:

- ``basic.auth.credentials.source``: ``USER_INFO`` (credentials from ``basic.auth.user.info``)
  or ``URL`` (from the URL's ``user:password@``, Confluent's default; no user info, no auth);
- ``basic.auth.user.info``: ``user:password`` (a secret: ``[hidden]`` wherever configs are shown;
  write it as ``${file:/path}`` or ``${env:NAME}``);
- ``schema.registry.ssl.ca.location``: PEM bundle of the CAs that sign the registry's certificate
  (empty: the system's CAs); ``schema.registry.ssl.certificate.location`` /
  ``schema.registry.ssl.key.location`` / ``schema.registry.ssl.key.password``: the client's own
  certificate for a registry that asks for one.

(confluent-kafka's ``SchemaRegistryClient`` takes the same values as ``basic.auth.user.info``,
``ssl.ca.location``, ``ssl.certificate.location`` and ``ssl.key.location``.)

:class:`RegistryAuth` carries them to Spark executors; its ``repr`` hides the secrets.
"""
from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

from ingest.config import Choice, Key, Str
from ingest.errors import ConfigError

REGISTRY_CLIENT_KEYS = (
    Key("basic.auth.credentials.source", Choice(("URL", "USER_INFO")), "URL",
        "where the registry credentials come from: USER_INFO (basic.auth.user.info) or URL (user:password@ in "
        "the URL; none there: no authentication)"),
    Key("basic.auth.user.info", Str(), "",
        "user:password for the registry's HTTP basic auth (with basic.auth.credentials.source=USER_INFO); "
        "a secret: use ${file:PATH} or ${env:NAME}"),
    Key("schema.registry.ssl.ca.location", Str(), "",
        "PEM bundle of the CAs that sign an https registry's certificate (empty: the system's CAs)"),
    Key("schema.registry.ssl.certificate.location", Str(), "",
        "PEM certificate this client shows an https registry that asks for one (ssl.client.authentication)"),
    Key("schema.registry.ssl.key.location", Str(), "", "PEM private key of schema.registry.ssl.certificate.location"),
    Key("schema.registry.ssl.key.password", Str(), "", "password of schema.registry.ssl.key.location, if encrypted"),
)


@dataclass(frozen=True)
class RegistryAuth:
    """A registry client's credentials and TLS files (picklable; ``repr`` hides the secrets)."""

    user_info: str = field(default="", repr=False)
    ca_location: str = ""
    certificate_location: str = ""
    key_location: str = ""
    key_password: str = field(default="", repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "RegistryAuth":
        """The settings of :data:`REGISTRY_CLIENT_KEYS` in ``config`` (a parsed config of a component).

        Raises:
            ConfigError: ``USER_INFO`` without a ``user:password`` in ``basic.auth.user.info``.
        """
        user_info = ""
        if config["basic.auth.credentials.source"] == "USER_INFO":
            user_info = config["basic.auth.user.info"]
            if ":" not in user_info:
                raise ConfigError("basic.auth.credentials.source=USER_INFO needs basic.auth.user.info=user:password "
                                  f"({'empty' if not user_info else 'no : in it'})")
        return cls(user_info, config["schema.registry.ssl.ca.location"],
                   config["schema.registry.ssl.certificate.location"], config["schema.registry.ssl.key.location"],
                   config["schema.registry.ssl.key.password"])

    def headers(self, user_info: str = "") -> dict[str, str]:
        """The ``Authorization`` header of these credentials (or of ``user_info`` when there are none), or none."""
        credentials = self.user_info or user_info
        if not credentials:
            return {}
        return {"Authorization": "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")}

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of an https registry: host names checked, the CA bundle or the system's CAs.

        Raises:
            ConfigError: a CA, certificate or key file that cannot be loaded.
        """
        try:
            ctx = ssl.create_default_context(cafile=self.ca_location or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"schema.registry.ssl.ca.location={self.ca_location}: cannot load PEM CA "
                              f"certificates: {exc}") from None
        if self.certificate_location:
            try:
                ctx.load_cert_chain(self.certificate_location, self.key_location or None, self.key_password or None)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"schema.registry.ssl.certificate.location={self.certificate_location}: cannot "
                                  f"load the certificate and key: {exc}") from None
        return ctx


NO_AUTH = RegistryAuth()
