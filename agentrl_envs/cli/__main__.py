"""``python -m agentrl_envs.cli``: the ``agentrl-envs`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
