"""TLS pieces without a network: the principal of a certificate subject (RFC 2253, as Kafka's default
principal builder), and contexts refused with the key that is wrong."""
from __future__ import annotations

import pytest

from ingest.errors import ConfigError
from ingest.wire.tls import ANONYMOUS, client_context, distinguished_name, principal_of


def test_the_subject_is_written_most_specific_first_with_rfc_2253_keywords():
    subject = ((("countryName", "US"),), (("organizationName", "Example"),),
               (("organizationalUnitName", "ops"),), (("commonName", "alice"),))
    assert principal_of({"subject": subject}) == "User:CN=alice,OU=ops,O=Example,C=US"


def test_special_characters_are_escaped_and_multi_valued_rdns_joined_with_plus():
    subject = ((("organizationName", 'Acme, Inc; "x" <y>'),), (("commonName", "#a"), ("userId", "b ")),)
    assert distinguished_name(subject) == 'CN=\\#a+UID=b\\ ,O=Acme\\, Inc\\; \\"x\\" \\<y\\>'


def test_no_certificate_is_anonymous():
    assert principal_of(None) == principal_of({}) == ANONYMOUS == "User:ANONYMOUS"


def test_a_client_key_without_its_certificate_is_refused_naming_both_keys(tmp_path):
    with pytest.raises(ConfigError, match="ssl.key.location=.*needs ssl.certificate.location"):
        client_context(key_location=str(tmp_path / "client.key"))
    with pytest.raises(ConfigError, match="ssl.ca.location: .* does not exist"):
        client_context(ca_location=str(tmp_path / "missing.pem"))
