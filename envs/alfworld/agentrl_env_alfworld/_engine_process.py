"""An ALFWorld engine process: ``python -m agentrl_env_alfworld._engine_process FD`` serves the game
requests that arrive on the socket ``FD`` until it closes (see :mod:`.pool`)."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from .pool import _serve

if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
