"""The outside probe of issue 38, replayed against the KG worker (held item 8): tool arguments
that carry SPARQL (a closing ``}`` and ``UNION``, quotes, ``SERVICE <…>``, ``file:`` IRIs) are
refused as tool errors the model reads, the session goes on, and no request leaves the worker.

The embedded store (pyoxigraph) does run ``SERVICE`` clauses: a query that reached it would POST
to the listener below (checked by the control test), so "no connection" means no query carried
the payload. A real KG worker process behind a controller, over loopback.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from agentrl_envs.stack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class Listener:
    """A TCP listener on loopback that counts connections (an outbound request would be one)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.sock.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(["kg"], split="dev", log_dir=tmp_path_factory.mktemp("kg-attack-logs")) as s:
        yield s


def payloads(port: int) -> list[str]:
    service = f"SERVICE <http://127.0.0.1:{port}/sparql> {{ ?s ?p ?o }}"
    return [
        f"m.0abc> ?p ?o }} UNION {{ {service} }} #",
        f'm.0abc" . {service} . "',
        f"}} UNION {{ {service} }}",
        "<file:///etc/passwd>",
        "ns:m.0abc> ; DROP ALL ; <x",
        f"#0 }} {service}",
    ]


def call(client: httpx.Client, sid: str, name: str, **arguments) -> dict:
    tool_call = {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    r = client.post(
        "/interact", headers={"session_id": sid}, json={"messages": [{"role": "assistant", "tool_calls": [tool_call]}]}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_the_store_would_send_a_service_request(listener):
    """The control: the payloads' SERVICE clause, run by the embedded store, reaches the listener."""
    import pyoxigraph

    before = listener.connections
    with pytest.raises(OSError):
        list(pyoxigraph.Store().query(f"SELECT * WHERE {{ SERVICE <http://127.0.0.1:{listener.port}/sparql> {{ ?s ?p ?o }} }}"))
    assert listener.connections == before + 1


def test_sparql_in_tool_arguments_is_refused_and_nothing_leaves(stack, listener):
    before = listener.connections
    with httpx.Client(base_url=f"{stack.url}/api", timeout=60) as client:
        r = client.post("/start_sample", json={"name": "kg", "index": 0})
        assert r.status_code == 200, r.text
        sid = r.headers["session_id"]
        opening = r.json()["messages"][-1]["content"]
        entity = opening.split("Entities: [", 1)[1].split(",")[0].rstrip("]")  # a real entity of the question
        answers = []
        for bad in payloads(listener.port)[:3]:  # 15 rounds: a few of each tool
            answers.append(call(client, sid, "get_relations", variable=bad))
            answers.append(call(client, sid, "get_neighbors", variable=entity, relation=bad))
        for bad in payloads(listener.port)[3:]:
            answers.append(call(client, sid, "get_attributes", variable=bad))
            answers.append(call(client, sid, "intersection", variable1=bad, variable2=bad))
        ok = call(client, sid, "get_relations", variable=entity)  # the session goes on
        client.post("/cancel", headers={"session_id": sid})
    for a in answers:
        assert a["status"] == "running" and not a["finish"], a
        assert a["messages"][0]["content"].startswith("Error: "), a  # a tool error the model reads
    assert ok["metrics"]["tool_errors"] == len(answers), ok["metrics"]
    assert ok["messages"][0]["content"].startswith("Observation: ["), ok
    assert listener.connections == before, "a tool argument made the store send a request"
