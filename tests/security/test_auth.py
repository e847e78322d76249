"""Authentication (issue 17 part 1): with tokens configured, every route but ``/health`` refuses a
request without the right token, on the controller and on the worker. The routes are enumerated
from the apps themselves, so a route added later is covered (and guarded: unlisted routes need an
admin token) without touching this file."""

from __future__ import annotations

import base64
import logging
import socket

import httpx
import pytest
from security_helpers import ADMIN, ALICE, BOB, WORKER, auth

from agentrl_envs import cli
from agentrl_envs.controller.app import ROLES
from agentrl_envs.errors import AgentRLEnvsError
from agentrl_envs.transport.auth import (
    ADMIN as ADMIN_ROLE,
)
from agentrl_envs.transport.auth import (
    Authenticator,
    Principal,
    is_loopback,
    require_auth_off_loopback,
    split_userinfo,
)
from agentrl_envs.transport.mux import PATH as MUX_PATH
from agentrl_envs.transport.mux import UPGRADE_TOKEN

WRONG = "not-a-token"


def routes(front) -> list[tuple[str, str]]:
    """Every (method, path) an app serves: its FastAPI routes (the OpenAPI pages too) and fast routes."""
    out = set(front.routes)
    for r in front.app.routes:
        for m in getattr(r, "methods", None) or ():
            if m != "HEAD":
                out.add((m, r.path))
    return sorted(out)


def controller_routes(stack) -> list[tuple[str, str]]:
    return routes(stack.controller.server.config.app)


def worker_routes(stack) -> list[tuple[str, str]]:
    return routes(stack.worker.server.config.app)


def call(base: str, method: str, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {} if method == "POST" else None
    return httpx.request(method, base + path, headers=headers, json=body, params={"name": "calc"}, timeout=30)


def assert_refused(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.request.url, r.status_code, r.text)
    body = r.json()
    assert body["error"] == code and body["detail"], body
    assert WRONG not in r.text and ADMIN not in r.text and WORKER not in r.text  # never echoed


def test_routes_are_enumerated(secure_stack):
    found = controller_routes(secure_stack)
    for path in ("/api/start_sample", "/api/interact", "/api/receive_heartbeat", "/api/list_sessions", "/metrics", "/health"):
        assert any(p == path for _, p in found), path
    assert ("GET", "/api/worker_status") in worker_routes(secure_stack)


@pytest.mark.parametrize("headers", [None, auth(WRONG), {"Authorization": WRONG}, {"Authorization": "Basic !!!"}])
def test_every_controller_route_refuses_without_the_right_token(secure_stack, headers):
    for method, path in controller_routes(secure_stack):
        r = call(secure_stack.url, method, path, headers)
        if path == "/health":
            assert r.status_code == 200, r.text
        else:
            assert_refused(r, 401, "unauthorized")
            assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("headers", [None, auth(WRONG), auth(ADMIN), auth(ALICE)])
def test_every_worker_route_refuses_anything_but_the_worker_secret(secure_stack, headers):
    # A client token is a valid token of the controller, not of the worker: 401 there too.
    for method, path in worker_routes(secure_stack):
        r = call(secure_stack.worker_url, method, path, headers)
        if path == "/health":
            assert r.status_code == 200, r.text
        else:
            assert_refused(r, 401, "unauthorized")


def test_roles_are_kept_apart(secure_stack):
    for method, path in controller_routes(secure_stack):
        if path == "/health":
            continue
        role = ROLES.get(path, ADMIN_ROLE)
        # The worker secret opens the worker routes only; a plain client token the client routes only.
        r = call(secure_stack.url, method, path, auth(WORKER))
        assert (r.status_code == 403) == (role != "worker"), (path, r.status_code, r.text)
        r = call(secure_stack.url, method, path, auth(BOB))
        assert (r.status_code == 403) == (role != "client"), (path, r.status_code, r.text)
        # The shared token opens client and admin routes, never a worker's.
        r = call(secure_stack.url, method, path, auth(ADMIN))
        assert (r.status_code in (401, 403)) == (role == "worker"), (path, r.status_code, r.text)


def test_the_worker_secret_opens_the_worker(secure_stack):
    for method, path in worker_routes(secure_stack):
        r = call(secure_stack.worker_url, method, path, auth(WORKER))
        assert r.status_code not in (401, 403), (path, r.text)


def _upgrade(port: int, headers: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            f"GET /api{MUX_PATH} HTTP/1.1\r\nhost: x\r\n{headers}connection: upgrade\r\nupgrade: {UPGRADE_TOKEN.decode()}\r\n\r\n".encode()
        )
        return s.recv(65536)


def test_the_multiplexed_upgrade_needs_the_worker_secret(secure_stack):
    port = secure_stack.worker.port
    assert _upgrade(port, "").startswith(b"HTTP/1.1 401")
    assert _upgrade(port, f"authorization: Bearer {ADMIN}\r\n").startswith(b"HTTP/1.1 401")
    assert _upgrade(port, f"authorization: Bearer {WORKER}\r\n").startswith(b"HTTP/1.1 101")


def test_the_controller_steps_through_the_multiplexed_connection_with_its_secret(secure_stack):
    sid = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(BOB), json={"name": "calc", "index": 0})
    assert sid.status_code == 200, sid.text
    r = httpx.post(
        f"{secure_stack.url}/api/interact",
        headers={**auth(BOB), "session_id": sid.headers["session_id"]},
        json={"messages": [{"role": "assistant", "content": None, "tool_calls": [_call("answer", '{"value": 5}')]}]},
    )
    assert r.status_code == 200 and r.json()["finish"] and r.json()["reward"] == 1, r.text
    assert secure_stack.service._http._hosts[f"{secure_stack.worker_url}/api"].mux is not None


def _call(name: str, arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_basic_auth_and_url_userinfo_carry_the_token(secure_stack):
    basic = base64.b64encode(f"agentrl:{BOB}".encode()).decode()
    assert httpx.get(f"{secure_stack.url}/api/get_indices?name=calc", headers={"Authorization": f"Basic {basic}"}).json() == [
        0,
        1,
    ]
    user_only = base64.b64encode(f"{BOB}:".encode()).decode()
    assert (
        httpx.get(f"{secure_stack.url}/api/get_indices?name=calc", headers={"Authorization": f"Basic {user_only}"}).status_code
        == 200
    )
    # httpx (agentrl-eval's client) turns a URL's userinfo into Basic auth.
    host = secure_stack.url.removeprefix("http://")
    with httpx.Client(base_url=f"http://agentrl:{BOB}@{host}/api/") as c:
        assert c.get("get_indices", params={"name": "calc"}).json() == [0, 1]
    bad = base64.b64encode(f"agentrl:{WRONG}".encode()).decode()
    assert_refused(
        httpx.get(f"{secure_stack.url}/api/get_indices?name=calc", headers={"Authorization": f"Basic {bad}"}), 401, "unauthorized"
    )


def test_a_session_answers_only_the_token_that_started_it(secure_stack):
    r = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(BOB), json={"name": "calc", "index": 0})
    sid = r.headers["session_id"]
    step = {"messages": [{"role": "assistant", "content": None, "tool_calls": [_call("add", '{"x": 1}')]}]}
    other = httpx.post(f"{secure_stack.url}/api/interact", headers={**auth(ALICE), "session_id": sid}, json=step)
    assert_refused(other, 404, "unknown_session")
    assert_refused(
        httpx.post(f"{secure_stack.url}/api/cancel", headers={**auth(ALICE), "session_id": sid}), 404, "unknown_session"
    )
    own = httpx.post(f"{secure_stack.url}/api/interact", headers={**auth(BOB), "session_id": sid}, json=step)
    assert own.status_code == 200 and not own.json()["finish"], own.text
    assert httpx.post(f"{secure_stack.url}/api/cancel", headers={**auth(ADMIN), "session_id": sid}).status_code == 200
    # Ended, it stays another client's: no status leaks (404, as for a session that never was);
    # its own client learns how it ended.
    other = httpx.post(f"{secure_stack.url}/api/interact", headers={**auth(ALICE), "session_id": sid}, json=step)
    assert_refused(other, 404, "unknown_session")
    own = httpx.post(f"{secure_stack.url}/api/interact", headers={**auth(BOB), "session_id": sid}, json=step)
    assert_refused(own, 409, "session_finished")


def test_tokens_are_never_logged(secure_stack, caplog):
    with caplog.at_level(logging.DEBUG):
        for token in (WRONG, ALICE):
            call(secure_stack.url, "POST", "/api/receive_heartbeat", auth(token))
            call(secure_stack.worker_url, "POST", "/api/start_sample", auth(token))
    for secret in (WRONG, ALICE, ADMIN, WORKER):
        assert secret not in caplog.text


def test_lookup_tells_apart_only_exact_tokens():
    a = Authenticator({"tok": Principal("p", frozenset({"client"}))})
    for good in (b"Bearer tok", b"bearer tok", b"Basic " + base64.b64encode(b"agentrl:tok"), b"Basic dG9r"):
        assert a.principal(good) is not None, good  # dG9r: "tok" as Basic's user, no password: taken as the token
    for bad in (b"Bearer to", b"Bearer tokk", b"Bearer  tok2", b"tok", b"", b"Basic " + base64.b64encode(b"agentrl:to")):
        assert a.principal(bad) is None, bad
    assert a.principal(None) is None
    assert Authenticator().principal(None) is not None  # no tokens: open (the loopback default)


def test_a_token_is_accepted_only_by_a_constant_time_comparison(monkeypatch):
    """The lookup finds a candidate by hash; :func:`hmac.compare_digest` (constant time) decides.
    A comparison that answers "different" refuses even the right token, both spellings, the
    first time and from the table of verified header values alike."""
    import hmac

    real, seen = hmac.compare_digest, []

    def compare(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare)
    a = Authenticator({"tok": Principal("p", frozenset({"client"}))})
    basic = b"Basic " + base64.b64encode(b"agentrl:tok")
    for header in (b"Bearer tok", basic, basic):  # the second Basic comes from the verified table
        seen.clear()
        assert a.principal(header) is not None
        assert seen and all(real(x, y) for x, y in seen), seen
    monkeypatch.setattr(hmac, "compare_digest", lambda x, y: False)
    for header in (b"Bearer tok", basic):
        assert a.principal(header) is None, header


def test_beyond_loopback_tokens_are_required_unless_insecure(capsys):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    with pytest.raises(AgentRLEnvsError, match="--insecure"):
        require_auth_off_loopback("0.0.0.0", Authenticator(), insecure=False, what="controller", how="set tokens")
    require_auth_off_loopback("0.0.0.0", Authenticator(), insecure=True, what="controller", how="set tokens")
    assert cli.main(["controller", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert cli.main(["worker", "echo", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve the controller on 0.0.0.0" in err and "refusing to serve the worker" in err


def test_userinfo_is_split_from_urls():
    assert split_userinfo("http://agentrl:s3cret@h:5020/api") == ("http://h:5020/api", "s3cret")
    assert split_userinfo("http://s3cret@h/api") == ("http://h/api", "s3cret")
    assert split_userinfo("http://h:1/api") == ("http://h:1/api", None)
