"""Container deployment: build every image locally and run the stack as containers.

* :mod:`.engine` — connecting to the Docker engine (the ``docker`` SDK, ``pip install 'agentrl-envs[docker]'``).
* :mod:`.build` — ``agentrl-envs build [TASK...]``: ``agentrl/base`` (``docker import`` of the Debian
  root filesystem from :mod:`agentrl_envs.sandbox.rootfs`), ``agentrl/controller`` and one
  ``agentrl/worker-<task>`` per task through the task's own ``envs/<task>/Dockerfile``.
* :mod:`.up` — ``agentrl-envs up --backend docker``: the controller and the workers as containers
  on the host network, torn down (only what it started) on exit.

Importing this package is cheap; the SDK is imported on first use.
"""

from __future__ import annotations
