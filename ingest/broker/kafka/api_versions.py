"""ApiVersions (18): the APIs and versions served (KIP-35); v3+ check the client's software name and version.

An ApiVersions request of a version newer than served never reaches here: the dispatcher answers it
UNSUPPORTED_VERSION in the v0 layout (KIP-511). From v3 the request names the client's software;
Kafka answers INVALID_REQUEST (42) unless both are letters, digits, ``-`` and ``.``, starting and
ending with a letter or digit (``ApiVersionsRequest.isValid``), and so does this broker.
"""
from __future__ import annotations

import re

from ingest.broker.kafka.versions import ADVERTISED_KEYS
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.api_versions import ApiVersionsRequest, ApiVersionsResponse

SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def handle(apis, req: ApiVersionsRequest, ctx) -> ApiVersionsResponse:
    if ctx.version >= 3 and not (SOFTWARE_NAME_VERSION.fullmatch(req.client_software_name)
                                 and SOFTWARE_NAME_VERSION.fullmatch(req.client_software_version)):
        apis.refusals.warning(ctx.client, "ApiVersions bad software name",
                              "client %s: ApiVersions v%d names its software %r version %r: not letters, digits, '-'"
                              " and '.' (starting and ending with a letter or digit); answered INVALID_REQUEST",
                              ctx.client, ctx.version, req.client_software_name, req.client_software_version)
        return ApiVersionsResponse(KafkaErrorCode.INVALID_REQUEST, ())
    return ApiVersionsResponse(KafkaErrorCode.NONE, ADVERTISED_KEYS)


def error(req: ApiVersionsRequest, code: int, ctx) -> ApiVersionsResponse:
    return ApiVersionsResponse(code, ())
