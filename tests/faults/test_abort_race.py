"""The race behind a step the partition benchmark once saw hang (benchmarks/faults.py, partition
round 3 at 200 sessions: one step to the cut-off worker was not answered within the 120 s request
timeout): when a worker is declared dead, ``UpstreamPool.abort`` fails the requests in flight to
it, but a request that is opening its connection at that moment is not among them; it goes on,
writes to the dead worker, and waits for the whole interaction timeout (240 s by default).

Fixed: the pool marks the worker given up, and a request that finishes opening its connection
after that fails at once.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from agentrl_envs.transport.upstream import UpstreamError, UpstreamPool


@pytest.mark.parametrize("multiplex", [True, False], ids=["multiplexed", "http"])
async def test_abort_also_fails_a_request_that_is_opening_its_connection(multiplex):
    with socket.socket() as hung:  # a worker that accepts (the kernel does) and never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        address = f"http://127.0.0.1:{hung.getsockname()[1]}/api"
        pool = UpstreamPool(multiplex=multiplex)  # multiplexed: waiting for the upgrade's answer
        try:
            request = asyncio.create_task(pool.post(address, "interact", b"{}", 600.0))
            await asyncio.sleep(0)  # the request is now opening its connection
            pool.abort(address, "declared dead")
            # Failed by the abort, not left waiting for its 600 s timeout (5 s: a guard, not a speed check).
            with pytest.raises(UpstreamError):
                await asyncio.wait_for(request, 5.0)
        finally:
            await pool.close()
