"""The embedded model server: SmolLM2-135M-Instruct (or any local HF model) behind an OpenAI API.

* :mod:`.toolcalls` — prompt rendering and completion parsing (pure; shared with the trainer)
* :mod:`.engine` — :class:`~.engine.TransformersEngine`, generation on the CPU with transformers
* :mod:`.grammar` — the tool-call grammar (xgrammar) for ``tool_choice="required"`` and the trainer
* :mod:`.batching` — :class:`~.batching.BatchSampler` / :class:`~.batching.BatchedChat`: concurrent
  requests decoded together (the server's engine; the trainer's local engine samples through it)
* :mod:`.server` — the FastAPI app (``/v1/chat/completions``, ``/v1/models``, ``/health``)
* :mod:`.errors` — what loading and serving raise
* :mod:`.launch` — :func:`~.launch.serve_model` and :class:`~.launch.LocalModelServer`

Importing this package does not import torch; only :mod:`.engine` does.
"""
