"""Our tasks where people already train and share environments.

* :mod:`agentrl_envs.integrations.trl` — every task as an environment of TRL's
  ``GRPOTrainer(environment_factory=...)`` (docs/trl.md);
* :mod:`agentrl_envs.integrations.openenv` — every task served as an OpenEnv environment, and any
  OpenEnv environment run as a task behind our controller (docs/openenv.md).

Each module imports its framework lazily or at use, so importing this package needs neither.
"""
