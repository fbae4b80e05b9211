"""The operator's API client sends the token of kopf's *latest* login: service-account tokens
are short-lived, kopf logs in again on a 401 and hands the new credentials over."""

from __future__ import annotations

import json

import kopf
import pytest
from aiohttp import web

from distgnn_operator.kube import ApiError, KubeApi


async def test_a_new_login_replaces_the_token_of_an_open_session() -> None:
    seen: list[str] = []

    async def secret(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer fresh":
            return web.json_response({"message": "Unauthorized"}, status=401)
        body = {"kind": "Secret", "metadata": {"name": request.match_info["name"]}}
        return web.Response(text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", secret)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api = KubeApi(timeout_s=10)
    try:
        api.set_credentials(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="old"))
        with pytest.raises(ApiError) as e:  # the expired token
            await api.get("Secret", "ns", "s")
        assert e.value.status == 401
        # kopf's re-login (its own request got 401) calls our login handler
        api.set_credentials(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="fresh"))
        got = await api.get("Secret", "ns", "s")
        assert got is not None and got["metadata"]["name"] == "s"
        assert seen == ["Bearer old", "Bearer fresh"]
    finally:
        await api.close()
        await runner.cleanup()


async def test_a_401_logs_in_again_once_and_resends() -> None:
    """The token expired but the kubelet has written a new one: the request is sent once
    more with it, without waiting for kopf's next 401; a login that gives nothing new
    leaves the 401."""
    seen: list[str] = []

    async def secret(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer fresh":
            return web.json_response({"message": "Unauthorized"}, status=401)
        return web.json_response({"kind": "Secret", "metadata": {"name": "s"}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", secret)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server = f"http://127.0.0.1:{runner.addresses[0][1]}"
    api = KubeApi(timeout_s=10)
    try:
        api.set_credentials(kopf.ConnectionInfo(server=server, token="old"))
        api.relogin = lambda: kopf.ConnectionInfo(server=server, token="fresh")
        got = await api.get("Secret", "ns", "s")
        assert got is not None and seen == ["Bearer old", "Bearer fresh"]
        api.set_credentials(kopf.ConnectionInfo(server=server, token="old"))
        api.relogin = lambda: kopf.ConnectionInfo(server=server, token="still-old")
        seen.clear()
        with pytest.raises(ApiError) as e:
            await api.get("Secret", "ns", "s")
        assert e.value.status == 401 and seen == ["Bearer old", "Bearer still-old"]
    finally:
        await api.close()
        await runner.cleanup()
