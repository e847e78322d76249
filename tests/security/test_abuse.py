"""The abuse suite (issue 17 part 5): each case is answered with a clear 4xx in the one error
shape, and nothing else is disturbed: a legitimate session opened before the abuse steps on
through it, and the controller still lists exactly the one real worker afterwards.

Cases: a rogue worker (no secret, a client's token, a bad name or address), oversized bodies
(declared and chunked), header floods (many headers, one huge header, a huge URL), slow-loris
(a request trickled in, a connection that never sends), malformed HTTP, and path and header
injection in task names and session ids. Loopback only; no wall-clock asserts (the server's own
1 s read timeout ends the slow cases).
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from security_helpers import ADMIN, BOB, LIMITS, WORKER, auth

STEP = {"messages": [{"role": "assistant", "content": None, "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"x": 1}'}}
]}]}  # fmt: skip


@pytest.fixture(scope="module")
def legit(secure_stack):
    """A session opened before the abuse; the last test steps it to its end."""
    r = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(BOB), json={"name": "calc", "index": 1})
    assert r.status_code == 200, r.text
    return r.headers["session_id"]


def step_legit(stack, sid: str) -> None:
    r = httpx.post(f"{stack.url}/api/interact", headers={**auth(BOB), "session_id": sid}, json=STEP, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "running", r.text


def raw(port: int, data: bytes, *, read_timeout: float = 30.0) -> bytes:
    """Send raw bytes; everything the server answers until it closes (or ``read_timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        if data:
            s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return out


def error_of(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def assert_error(r: httpx.Response | bytes, status: int, code: str) -> dict:
    if isinstance(r, bytes):
        got, body = error_of(r)
    else:
        got, body = r.status_code, r.json()
    assert got == status and body["error"] == code and body["detail"], (got, body)
    return body


# ---------------------------------------------------------------------------- rogue workers


def heartbeat(stack, headers: dict, **fields) -> httpx.Response:
    body = {"name": "calc", "address": "http://127.0.0.1:9/api", "concurrency": 99, "indices": [0, 1], **fields}
    return httpx.post(f"{stack.url}/api/receive_heartbeat", headers=headers, json=body)


def test_rogue_worker_without_the_secret_is_refused(secure_stack, legit):
    assert_error(heartbeat(secure_stack, {}), 401, "unauthorized")
    assert_error(heartbeat(secure_stack, auth("guess")), 401, "unauthorized")
    assert_error(heartbeat(secure_stack, auth(BOB)), 403, "forbidden")  # a client's token registers nothing
    assert_error(heartbeat(secure_stack, auth(ADMIN)), 403, "forbidden")
    # Nor can it announce sessions' ends.
    r = httpx.post(f"{secure_stack.url}/api/cancel_notice", headers={"session_id": legit})
    assert_error(r, 401, "unauthorized")


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "../calc"},
        {"name": "calc\r\nX-Injected: 1"},
        {"name": ""},
        {"name": "c" * 500},
        {"address": "http://127.0.0.1:9/api HTTP/1.1\r\nX-Injected: 1\r\n"},
        {"address": "http://127.0.0.1:9/api?x=1"},
        {"address": "http://user:pw@127.0.0.1:9/api"},
        {"address": "file:///etc/passwd"},
        {"address": "http://127.0.0.1:99999/api"},
        {"address": "http:///api"},
    ],
)
def test_heartbeats_with_injected_names_or_addresses_are_refused(secure_stack, fields):
    assert_error(heartbeat(secure_stack, auth(WORKER), **fields), 422, "invalid_request")


# ---------------------------------------------------------------------------- oversized requests


def test_declared_oversized_bodies_are_refused_before_they_are_read(secure_stack):
    for path, token in [(p, BOB) for p in ("/api/start_sample", "/api/interact", "/api/cancel")] + [
        ("/api/receive_heartbeat", WORKER)
    ]:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n"
            f"content-length: {LIMITS.max_body + 1}\r\n\r\n"
        ).encode()
        assert_error(raw(secure_stack.controller.port, head + b"{"), 413, "request_too_large")
    # The worker's fast route too.
    head = f"POST /api/interact HTTP/1.1\r\nauthorization: Bearer {WORKER}\r\ncontent-length: {LIMITS.max_body + 1}\r\n\r\n"
    assert_error(raw(secure_stack.worker.port, head.encode()), 413, "request_too_large")


def test_chunked_oversized_bodies_are_refused(secure_stack):
    chunk = b"x" * 8192
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(LIMITS.max_body // len(chunk) + 2)) + b"0\r\n\r\n"
    for path in ("/api/start_sample", "/api/get_indices"):
        head = f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BOB}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
        assert_error(raw(secure_stack.controller.port, head + body), 413, "request_too_large")


def test_a_large_body_within_the_limit_is_served(secure_stack):
    big = {"name": "calc", "index": 0, "custom_task": None, "padding": "x" * (LIMITS.max_body // 2)}
    r = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(BOB), json=big)
    assert r.status_code == 200, r.text
    httpx.post(f"{secure_stack.url}/api/cancel", headers={**auth(BOB), "session_id": r.headers["session_id"]})


def test_header_floods_are_refused(secure_stack):
    port = secure_stack.controller.port
    many = "".join(f"x-flood-{i}: {i}\r\n" for i in range(LIMITS.max_headers + 10))
    assert_error(raw(port, f"GET /api/version HTTP/1.1\r\nhost: x\r\n{many}\r\n".encode()), 431, "headers_too_large")
    huge = "a" * (LIMITS.max_header_bytes + 10)
    assert_error(raw(port, f"GET /api/version HTTP/1.1\r\nhost: x\r\nx-big: {huge}\r\n\r\n".encode()), 431, "headers_too_large")
    assert_error(raw(port, f"GET /api/version?{huge} HTTP/1.1\r\nhost: x\r\n\r\n".encode()), 431, "headers_too_large")
    # On the worker too, and before the token is even looked at.
    assert_error(raw(secure_stack.worker.port, f"POST /api/interact HTTP/1.1\r\n{many}\r\n".encode()), 431, "headers_too_large")


# ---------------------------------------------------------------------------- slow-loris


def test_slow_loris_requests_are_cut_off(secure_stack, legit):
    port = secure_stack.controller.port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /api/interact HTTP/1.1\r\nhost: x\r\n")  # and never the rest
        step_legit(secure_stack, legit)  # served meanwhile
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert_error(answer, 408, "request_timeout")
    # A body promised and never sent.
    head = f"POST /api/start_sample HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BOB}\r\ncontent-length: 100\r\n\r\n{{".encode()
    assert_error(raw(port, head), 408, "request_timeout")


def test_a_connection_that_never_speaks_is_closed(secure_stack):
    for port in (secure_stack.controller.port, secure_stack.worker.port):
        assert_error(raw(port, b""), 408, "request_timeout")


# ---------------------------------------------------------------------------- malformed and injected


def test_malformed_http_is_refused(secure_stack):
    port = secure_stack.controller.port
    assert_error(raw(port, b"NOT HTTP AT ALL\r\n\r\n"), 422, "invalid_request")
    assert_error(raw(port, b"GET /api/version HTTP/1.1\r\nbad header line\r\n\r\n"), 422, "invalid_request")
    assert_error(raw(port, b"GET /api/\xff\xfe HTTP/1.1\r\nhost: x\r\n\r\n"), 422, "invalid_request")
    assert_error(raw(port, b"POST /api/interact HTTP/1.1\r\ncontent-length: x\r\n\r\n"), 422, "invalid_request")
    # A CR/LF smuggled into the session id header ends the headers early: not HTTP any more.
    smuggled = f"POST /api/cancel HTTP/1.1\r\nauthorization: Bearer {BOB}\r\nsession_id: 1\rX-Injected: 1\r\n\r\n"
    assert_error(raw(port, smuggled.encode()), 422, "invalid_request")


@pytest.mark.parametrize(
    "name", ["../../etc/passwd", "calc/../calc", "calc%00", "calc\r\nX-Injected: 1", "<script>", " calc", "c" * 300]
)
def test_injected_task_names_are_refused(secure_stack, name):
    r = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(BOB), json={"name": name, "index": 0})
    assert_error(r, 422, "invalid_request")
    r = httpx.get(f"{secure_stack.url}/api/get_indices", headers=auth(BOB), params={"name": name})
    assert_error(r, 422, "invalid_request")


@pytest.mark.parametrize(
    ("sid", "status", "code"),
    [
        ("../1", 400, "session_error"),
        ("1; DROP TABLE sessions", 400, "session_error"),
        ("0x10", 400, "session_error"),
        ("", 400, "session_error"),
        ("-1", 404, "unknown_session"),
        ("99999999999999999999999999999", 404, "unknown_session"),
    ],
)
def test_injected_session_ids_are_refused(secure_stack, sid, status, code):
    for path in ("/api/interact", "/api/cancel"):
        r = httpx.post(f"{secure_stack.url}{path}", headers={**auth(BOB), "session_id": sid}, json=STEP)
        assert_error(r, status, code)


def test_path_tricks_do_not_reach_guarded_routes(secure_stack):
    for path in (
        "/api/../api/list_sessions",
        "/health/../api/list_sessions",
        "/api/%2e%2e/api/list_workers",
        "//api/list_workers",
    ):
        answer = raw(secure_stack.controller.port, f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 401"), (path, answer[:200])


def test_pipelined_fast_requests_are_refused(secure_stack):
    one = f"POST /api/start_sample HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BOB}\r\ncontent-length: 2\r\n\r\n{{}}"
    answer = raw(secure_stack.controller.port, (one + one).encode())
    assert_error(answer[answer.index(b"HTTP/1.1 400") :], 400, "request_rejected")


@pytest.mark.parametrize("path", ["/api/start_sample", "/api/interact"])
def test_deeply_nested_json_is_refused(secure_stack, path, legit):
    """Issue 38's probe (held): JSON nested past any parser's recursion limit is a client error,
    not a crash, on the fast routes as on the others; the worker behind them is not reached."""
    body = b"[" * 20_000 + b"]" * 20_000  # 40 KB, under the stack's 64 KiB body limit
    headers = {**auth(BOB), "content-type": "application/json"}
    if path == "/api/interact":
        headers["session_id"] = legit
    r = httpx.post(f"{secure_stack.url}{path}", headers=headers, content=body)
    assert r.status_code in (400, 422) and r.json()["error"], r.text
    nested = {"name": "calc", "index": 0, "custom_task": json.loads("[" * 500 + "]" * 500)}
    r = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(BOB), json=nested)
    assert r.status_code in (400, 422) and r.json()["error"], r.text


# ---------------------------------------------------------------------------- nothing else disturbed


def test_zz_the_legit_session_and_worker_survived(secure_stack, legit):
    step_legit(secure_stack, legit)
    r = httpx.post(
        f"{secure_stack.url}/api/interact",
        headers={**auth(BOB), "session_id": legit},
        json={
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "answer", "arguments": '{"value": 6}'}}],
                }
            ]
        },  # fmt: skip
    )
    assert r.status_code == 200 and r.json()["finish"] and r.json()["reward"] == 1, r.text
    workers = httpx.get(f"{secure_stack.url}/api/list_workers", headers=auth(ADMIN)).json()
    assert list(workers) == ["calc"] and len(workers["calc"]) == 1 and workers["calc"][0]["alive"]
    assert workers["calc"][0]["address"] == f"{secure_stack.worker_url}/api"
