"""WebShop test fixtures: the smallest generated catalog (1,000 products) and its index, built once per run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrl_env_webshop.catalog import GeneratedCatalog
from agentrl_env_webshop.search import SearchIndex
from agentrl_envs import TaskRuntime, get_task

SMALL = 1000


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("webshop-index"))


@pytest.fixture(scope="session")
def small_catalog(index_dir: str) -> tuple[GeneratedCatalog, SearchIndex]:
    catalog = GeneratedCatalog(0, SMALL)
    return catalog, SearchIndex.open_or_build(catalog, index_dir)


def small_config(index_dir: str, **over: Any) -> dict[str, Any]:
    return {"products": SMALL, "index_dir": index_dir, **over}


@pytest.fixture
async def runtime(index_dir: str) -> AsyncIterator[TaskRuntime]:
    rt = TaskRuntime(get_task("webshop"), split="dev", config=small_config(index_dir))
    await rt.open()
    try:
        yield rt
    finally:
        await rt.close()
