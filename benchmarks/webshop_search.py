"""WebShop search latency and worker memory at a given catalog size.

    .venv/bin/python benchmarks/webshop_search.py --products 100000 1000000 \\
        --out benchmarks/results/webshop_search.json

For each size, in fresh processes: (1) build the generated catalog's index into a scratch
directory (generation + tantivy indexing; its time and peak RSS); (2) as a restarted worker
would, open that index (``WebShopTask.open_resources``), then time searches: the index alone
(``SearchIndex.search``, top 50) and the whole ``search_action`` step (search + the results page,
which regenerates the 10 products it shows), for two query kinds: goal titles (what the
reference shopper types) and goal instructions (long free text, as a model might type). RSS is
read from /proc after opening and after the queries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {
        "n": len(ordered),
        "p50_ms": pick(0.50),
        "p90_ms": pick(0.90),
        "p99_ms": pick(0.99),
        "mean_ms": statistics.fmean(ordered) * 1000,
    }


def build(products: int, index_dir: str) -> dict[str, Any]:
    from agentrl_env_webshop.catalog import GeneratedCatalog
    from agentrl_env_webshop.samples import CATALOG_SEED
    from agentrl_env_webshop.search import SearchIndex

    start = time.perf_counter()
    index = SearchIndex.open_or_build(GeneratedCatalog(CATALOG_SEED, products), index_dir)
    return {"build_s": time.perf_counter() - start, "build_peak_rss_mb": peak_mb(), "docs": index.num_docs}


def serve(products: int, index_dir: str, queries: int) -> dict[str, Any]:
    from agentrl_env_webshop import WebShopTask
    from agentrl_env_webshop.samples import load_split

    base_rss = rss_mb()
    config = WebShopTask.Config(products=products, index_dir=index_dir)
    start = time.perf_counter()
    shops = asyncio.run(WebShopTask.open_resources(config))
    open_s = time.perf_counter() - start
    rss_open = rss_mb()
    goals = [g for split in ("test", "dev", "train") for g in load_split(split)][:queries]
    out: dict[str, Any] = {"open_s": open_s, "rss_before_open_mb": base_rss, "rss_after_open_mb": rss_open}
    for kind, field in (("title", "name"), ("instruction", "instruction_text")):
        out[kind] = asyncio.run(_queries(shops, config, goals, field))
    out["rss_after_queries_mb"] = rss_mb()
    out["peak_rss_mb"] = peak_mb()
    return out


async def _queries(shops: Any, config: Any, goals: list[dict[str, Any]], field: str) -> dict[str, Any]:
    from agentrl_env_webshop import WebShopTask

    catalog, index = shops.generated
    search_s, step_s, found = [], [], 0
    for goal in goals:
        t0 = time.perf_counter()
        hits = index.search(goal[field].lower())
        search_s.append(time.perf_counter() - t0)
        found += catalog.index_of(goal["asin"]) in hits
        task = WebShopTask(goal, config=config, resources=shops)
        await task.setup()
        t0 = time.perf_counter()
        await task.search_action(goal[field])
        step_s.append(time.perf_counter() - t0)
    return {"search": percentiles(search_s), "search_action_step": percentiles(step_s), "target_in_top50": found / len(goals)}


def run_child(mode: str, products: int, index_dir: str, queries: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--products",
        str(products),
        "--index-dir",
        index_dir,
        "--queries",
        str(queries),
    ]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--products", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--queries", type=int, default=1000, help="searches per query kind")
    p.add_argument("--index-dir", help="keep the indexes here (default: a scratch directory, removed after)")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", choices=["build", "serve"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        fn = build if a.child == "build" else serve
        print(json.dumps(fn(a.products[0], a.index_dir) if a.child == "build" else fn(a.products[0], a.index_dir, a.queries)))
        return
    scratch = a.index_dir or tempfile.mkdtemp(prefix="webshop-bench-")
    results = []
    try:
        for n in a.products:
            row = {"products": n, **run_child("build", n, scratch, a.queries), **run_child("serve", n, scratch, a.queries)}
            print(json.dumps(row), flush=True)
            results.append(row)
    finally:
        if not a.index_dir:
            shutil.rmtree(scratch, ignore_errors=True)
    report = {"benchmark": "webshop_search", "cpus": os.cpu_count(), "python": sys.version.split()[0], "results": results}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
