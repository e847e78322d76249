"""The embedded model server: SmolLM2-135M-Instruct (or any local HF model) behind an OpenAI API.

A thin HTTP layer over the chat layer (:mod:`agentrl_envs.chat`):

* :mod:`.service` — :class:`~.service.ChatService`: chat requests through the continuously
  batching sampler; ``n`` choices, streaming deltas, the budget caps and guards
* :mod:`.responses` — the Responses API subset, mapped onto chat
* :mod:`.server` — the FastAPI app (``/v1/chat/completions``, ``/v1/responses``, ``/v1/models``,
  ``/health``) and :func:`~.server.serve_model`
* :mod:`.launch` — the server's flags and :class:`~.launch.LocalModelServer` (a child process)

Importing this package does not import torch.
"""
