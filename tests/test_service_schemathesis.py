"""A property-based run of schemathesis against the app's own OpenAPI schema.

Run on the memory store, with an API key, with the store down, and (slow) on LevelDB, SQLite
and a real Redis. For every operation, schemathesis generates requests from the schema (valid
ones and, in negative mode, ones that break it) and checks each answer: never a 5xx, a status the
schema documents, the documented content type, and a body that matches the documented
model. Examples are bounded so the whole run takes seconds.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS as REGISTRY
from schemathesis.checks import load_all_checks, not_a_server_error
from schemathesis.python import asgi

from service import Settings, create_app
from tests.redis_server import free_port

load_all_checks()


def positive_data_acceptance(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's check, except for rules JSON Schema cannot state: a text needs a
    letter or digit (documented on the field; the answer is 422 ``empty_document``), and a
    search of ``GET /v1/groups`` needs a range that ends after it starts, dates in the
    calendar, a known zone and a term with a letter or digit (422 ``invalid_query``)."""
    if response.status_code == 422 and response.json()["error"]["code"] in (
        "empty_document",
        "invalid_query",
    ):
        return None
    return _positive_data_acceptance(ctx, response, case)


_positive_data_acceptance = next(
    c for c in REGISTRY.get_all() if c.__name__ == "positive_data_acceptance"
)
#: Every check schemathesis has (``--checks all``), positive and negative ones alike.
CHECKS = [
    positive_data_acceptance if c is _positive_data_acceptance else c for c in REGISTRY.get_all()
]


#: The apps under test: a working store, an API key required, and a store that is down;
#: and each other backend ({tmp}: a fresh directory; "redis": the session's server).
VARIANTS = {
    "memory": {},
    # A key no generated token can hit by chance (with "k", hypothesis once sent "Bearer k").
    "api-key": {"api_key": "5f0c1e9b7a2d4c6e8f1a3b5d7c9e0f2a"},
    "store-down": {"store_url": f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.2"},
    "leveldb": {"store_url": "leveldb://{tmp}/store.ldb"},
    "sqlite": {"store_url": "sqlite://{tmp}/store.db"},
    "redis": {"store_url": "redis"},
}

#: The backends beyond memory: slow (a few seconds each).
_SLOW = {"leveldb", "sqlite", "redis"}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(v, marks=pytest.mark.slow) if v in _SLOW else v for v in sorted(VARIANTS)
    ],
)
def api_schema(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[schemathesis.BaseSchema]:
    """The schema of an app with small limits (so 413 is reachable), served in-process."""
    options = {
        "store_url": "memory://",
        "max_batch": 5,
        "max_body_bytes": 64 * 1024,
        "max_compare_chars": 2000,
        **VARIANTS[request.param],
    }
    url = str(options["store_url"])
    if url == "redis":
        pytest.importorskip("redis")
        base = request.getfixturevalue("redis_base_url")
        options["store_url"] = f"{base}?prefix=schemathesis-{uuid.uuid4().hex[:8]}"
    elif "{tmp}" in url:
        if url.startswith("leveldb"):
            pytest.importorskip("plyvel")
        options["store_url"] = url.format(tmp=tmp_path_factory.mktemp(request.param))
    if str(options["store_url"]).startswith("redis"):
        pytest.importorskip("redis")
    app = create_app(Settings.model_validate(options))
    try:
        similarity = importlib.import_module("nshash.toolkit.similarity")
    except ImportError:
        pass
    else:
        # Start a compare process now (spawn, imports, jieba's dictionary: seconds on a busy
        # machine), so the first generated compare is not cut by the client's timeout.
        service = app.state.service
        asyncio.run(service.run_cpu(similarity.compare, "热门新闻", "新闻热门"))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.generation.update(
        modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
    )
    # Size limits answer 413 (DESIGN.md: "size limits give 413"), a rejection like 422.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    yield schema
    asgi.shutdown_lifespans()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(
    case: schemathesis.Case[Any], request: pytest.FixtureRequest
) -> None:
    """Generated requests never get a 5xx or an answer that breaks the schema.

    With the store down, 503 ``store_unavailable`` is the one 5xx allowed, and only on the
    operations that document it.
    """
    variant = request.node.callspec.params["api_schema"]
    if variant != "store-down":
        case.call_and_validate(checks=CHECKS)
        return
    response = case.call_and_validate(checks=[c for c in CHECKS if c is not not_a_server_error])
    if response.status_code >= 500:
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "store_unavailable"
