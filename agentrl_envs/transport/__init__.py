"""The hand-written network layer of the controller and the workers, in one place.

* :mod:`.http11`: the HTTP/1.1 server protocol (uvicorn's, extended) that answers the hot routes
  itself, and :mod:`.serve` that runs it;
* :mod:`.routes`: the route table of those hot routes, the one authentication check, and the ASGI
  entry to the FastAPI app that serves every other route; :mod:`.answers`: the one error shape;
* :mod:`.mux`: the multiplexed controller → worker transport (both ends);
* :mod:`.upstream`: the controller's client to its workers (HTTP/1.1 pool, and the mux);
* :mod:`.auth`: tokens, principals and quotas.
"""
