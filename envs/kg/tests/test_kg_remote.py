"""The remote backend against a real SPARQL server (Virtuoso, started by ``.ci/kg-sparql.sh``)
holding the generated default graph: every dev question solved through a controller and a worker,
and every episode the same, message for message, as on the embedded store.

Set ``AGENTRL_TEST_SPARQL_URL`` (``eval "$(bash .ci/kg-sparql.sh)"``); without it these tests
skip, except under ``CI=true`` where they fail. The graph is written into a named graph of its
own over the SPARQL 1.1 Graph Store protocol (Virtuoso's ``/sparql-graph-crud``; override with
``AGENTRL_TEST_SPARQL_STORE_URL``) and read through ``default_graph_uri``, so other graphs on the
server (a benchmark's million triples, say) change nothing.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest
from agentrl_env_kg import generate as G
from agentrl_env_kg.task import KGTask

from agentrl_envs import TaskRuntime
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.conformance import check_reference_replay
from agentrl_envs.policy import as_policy

SPARQL_URL = os.environ.get("AGENTRL_TEST_SPARQL_URL")
GRAPH_URI = "urn:agentrl:test:kg-default"


@pytest.fixture(scope="module")
def endpoint() -> str:
    if not SPARQL_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but AGENTRL_TEST_SPARQL_URL is unset: .ci/run starts the server (.ci/kg-sparql.sh)")
        pytest.skip('set AGENTRL_TEST_SPARQL_URL (eval "$(bash .ci/kg-sparql.sh)")')
    store_url = os.environ.get("AGENTRL_TEST_SPARQL_STORE_URL") or SPARQL_URL.rsplit("/", 1)[0] + "/sparql-graph-crud"
    graph, order = G.build_graph(G.DEFAULT_SEED, 1.0)
    body = G.ntriples(graph, order).encode()
    r = httpx.put(
        store_url,
        params={"graph-uri": GRAPH_URI, "graph": GRAPH_URI},
        content=body,
        headers={"Content-Type": "application/n-triples"},
        timeout=300,
    )
    assert r.status_code in (200, 201, 204), f"loading the graph into {store_url}: {r.status_code} {r.text[:300]}"
    count = httpx.post(
        SPARQL_URL,
        data={"query": f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{GRAPH_URI}> {{ ?s ?p ?o }} }}"},
        headers={"Accept": "application/sparql-results+json"},
        timeout=60,
    ).json()
    assert int(count["results"]["bindings"][0]["n"]["value"]) == len(body.splitlines())
    return SPARQL_URL


def _remote(endpoint: str) -> dict:
    return {"backend": "remote", "endpoint": endpoint, "default_graph_uri": GRAPH_URI}


def test_remote_check_dev_solves_every_question_through_controller_and_worker(endpoint):
    failures = check_reference_replay(KGTask, "dev", config=_remote(endpoint), require_all_references=True)
    assert failures == []


def _without_call_ids(messages: list[dict]) -> list[dict]:
    """The messages with each tool-call id replaced by its position in the episode (the reference
    policy draws ids from one process-wide counter, so two runs of a sample differ only there)."""
    ids: dict[str, str] = {}
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": ids.setdefault(c["id"], f"call_{len(ids)}")} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            m["tool_call_id"] = ids[m["tool_call_id"]]
        out.append(m)
    return out


async def _episodes(config: dict) -> list[list]:
    runtime = TaskRuntime(KGTask, split="dev", config=config)
    await runtime.open()
    sessions = InProcessSessions(runtime)
    try:
        transcripts = []
        for index in runtime.indices:
            t = await run_episode(sessions, "kg", index, as_policy(KGTask.reference_policy(runtime.samples[index])))
            transcripts.append(t)
        return [[t.reward, t.status, t.metrics, _without_call_ids(t.messages)] for t in transcripts]
    finally:
        await sessions.aclose()
        await runtime.close()


def test_remote_and_embedded_episodes_are_identical(endpoint):
    embedded = asyncio.run(_episodes({}))
    remote = asyncio.run(_episodes(_remote(endpoint)))
    assert len(embedded) == 36 and all(e[0] == 1.0 for e in embedded)
    assert sum(len(e[3]) for e in embedded) > 36 * 4  # whole conversations, not only the openings
    for i, (a, b) in enumerate(zip(embedded, remote, strict=True)):
        assert a == b, f"dev {i}: the remote episode differs from the embedded one"
