"""Shared pieces of the ``provledger serve`` tests: an API client that checks every
answer against the OpenAPI document, and a uvicorn server on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import jsonschema
import uvicorn
from starlette.applications import Starlette

from ledger.serve import openapi

DOC = openapi.document()
PREFIX = "/api/v1"


def _resolve(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow one ``$ref`` inside the OpenAPI document."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = DOC
    for part in str(ref).removeprefix("#/").split("/"):
        target = target[part]
    return dict(target)


def check_against_openapi(response: httpx.Response, method: str, template: str) -> None:
    """The status is documented for this operation and a JSON body matches its schema."""
    operation = DOC["paths"][PREFIX + template][method.lower()]
    documented = operation["responses"].get(str(response.status_code))
    assert documented is not None, (
        f"{method} {template} answered {response.status_code}, which its OpenAPI "
        f"operation does not document: {response.text[:300]}"
    )
    content = _resolve(documented).get("content", {})
    media = response.headers.get("content-type", "").split(";")[0]
    if media != "application/json":
        assert media in content, f"{method} {template}: media type {media} is not documented"
        return
    schema = {**content["application/json"]["schema"], "components": DOC["components"]}
    jsonschema.Draft202012Validator(schema).validate(response.json())


class Api:
    """Calls ``/api/v1`` routes by their OpenAPI template, as one principal."""

    def __init__(self, client: httpx.Client, token: str | None) -> None:
        self.client = client
        self.token = token

    def as_(self, token: str | None) -> Api:
        """The same client acting with another token."""
        return Api(self.client, token)

    def call(
        self,
        method: str,
        template: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        **path: str,
    ) -> httpx.Response:
        """One request; its answer is checked against the OpenAPI document."""
        sent = dict(headers or {})
        if self.token is not None:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        response = self.client.request(
            method,
            PREFIX + template.format(**path),
            json=json,
            params=params,
            content=content,
            headers=sent,
        )
        check_against_openapi(response, method, template)
        return response

    def get(self, template: str, **kwargs: Any) -> httpx.Response:
        """GET a route."""
        return self.call("GET", template, **kwargs)

    def post(self, template: str, **kwargs: Any) -> httpx.Response:
        """POST to a route."""
        return self.call("POST", template, **kwargs)


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The ``error`` object of a refusal."""
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    # a refusal by the status machine also names the status and what was needed
    extra = {"status", "allowed"} if error.get("type") == "InvalidTransitionError" else set()
    assert set(error) in ({"type", "message", "field"}, {"type", "message", "field", *extra})
    return error


def free_port() -> int:
    """A TCP port nothing listens on right now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running(app: Starlette) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
