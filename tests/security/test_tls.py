"""TLS (issue 17 part 2): controller and worker serve HTTPS given a certificate and key; the client,
the worker's heartbeats and the controller's hop to the worker (HTTP/1.1 and the multiplexed
transport) verify it against a CA file. The certificate is self-signed, made at test time with
the ``openssl`` command line, for 127.0.0.1 only."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import httpx
import pytest
from security_helpers import BOB, auth, start_secure_stack

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.errors import WorkerUnreachableError

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line")


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(d / "cert.pem"), str(d / "key.pem")


@pytest.fixture(scope="module")
def tls_stack(cert, tmp_path_factory):
    certfile, keyfile = cert
    files = {"ssl_certfile": certfile, "ssl_keyfile": keyfile}
    stack = start_secure_stack(
        tmp_path_factory.mktemp("tokens"),
        tls={"controller": files, "worker": files, "verify": certfile, "worker_ssl": ssl.create_default_context(cafile=certfile)},
    )
    yield stack
    stack.close()


async def test_an_episode_runs_over_https_end_to_end(tls_stack, cert):
    assert tls_stack.url.startswith("https://") and tls_stack.worker_url.startswith("https://")
    async with AsyncControllerClient(tls_stack.url, token=BOB, verify=cert[0]) as client:
        sid, first = await client.start_sample("calc", 0)
        assert "2 + 3" in first.messages[0]["content"]
        call = {"id": "a", "type": "function", "function": {"name": "answer", "arguments": '{"value": 5}'}}
        out = await client.interact(sid, [{"role": "assistant", "content": None, "tool_calls": [call]}])
        assert out.finish and out.reward == 1
    # The controller reached the https worker over TLS, on the multiplexed connection.
    host = tls_stack.service._http._hosts[f"{tls_stack.worker_url}/api"]
    assert host.ssl is not None and host.mux is not None


async def test_an_unverified_certificate_is_refused(tls_stack):
    async with AsyncControllerClient(tls_stack.url, token=BOB) as client:  # the system store does not know it
        with pytest.raises(WorkerUnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get_indices("calc")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{tls_stack.worker_url}/health")


def test_plain_http_to_an_https_port_gets_nothing(tls_stack, cert):
    with pytest.raises(httpx.HTTPError):
        httpx.get(tls_stack.url.replace("https://", "http://") + "/api/version", headers=auth(BOB), timeout=10)
    r = httpx.get(f"{tls_stack.url}/api/version", headers=auth(BOB), verify=ssl.create_default_context(cafile=cert[0]))
    assert r.status_code == 200
