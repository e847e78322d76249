"""Tasks that ship inside agentrl-envs itself (the real ones live in ``envs/``)."""
