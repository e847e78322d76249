"""OpenEnv, both ways (openenv-core from PyPI: ``pip install 'agentrl-envs[openenv]'``; docs/openenv.md).

* :mod:`.serve` — any of our tasks served as an OpenEnv environment: ``agentrl-envs openenv serve
  TASK``, or :func:`~agentrl_envs.integrations.openenv.serve.create_openenv_app`;
* :mod:`.task` — any OpenEnv environment (an OpenEnv server: a container or a local process) run
  as a task behind our controller: ``agentrl-envs worker openenv --option url=URL``, or
  :func:`~agentrl_envs.integrations.openenv.task.openenv_task` for a task class of its tools.

The submodules import openenv-core (which takes seconds to import) only when used.
"""
