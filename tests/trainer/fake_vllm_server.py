"""A fake of the server ``trl vllm-serve`` starts in TRL 1.16, for contract tests on the CPU.

TRL 1.16's ``trl vllm-serve`` runs vLLM's own OpenAI server in development mode
(``VLLM_SERVER_DEV_MODE=1``, NCCL weight transfer, ``--logprobs-mode processed_logprobs``;
``trl/scripts/vllm_serve.py``), and ``trl.generation.vllm_client.VLLMClient`` talks to it. This
app answers the same routes with the fields vLLM uses:

* ``GET /health``, ``GET /v1/models`` (``data[0].id``, ``max_model_len``),
  ``GET /server_info?config_format=json`` (``vllm_config.model_config.logprobs_mode``,
  ``vllm_config.weight_transfer_config``), ``GET /get_world_size``, ``GET /is_paused``;
* ``POST /v1/completions`` (token-id prompts, ``return_token_ids``, ``return_tokens_as_token_ids``,
  ``logprobs``, ``stop_token_ids``) and ``POST /v1/chat/completions``;
* ``POST /init_weight_transfer_engine``, ``/start_weight_update``, ``/update_weights``,
  ``/finish_weight_update``, ``/reset_prefix_cache``, ``/pause?mode=abort|wait|keep``, ``/resume``;
* errors in vLLM's shape, ``{"error": {"message", "type", "param", "code"}}``; a prompt over
  ``max_model_len`` is a 400 with vLLM's "maximum context length" wording.

The development routes (``/server_info``, weights, pause) answer 404 with ``dev_mode`` off, as
vLLM's do without ``VLLM_SERVER_DEV_MODE``. The NCCL broadcast itself is not here: a test
replaces the engine's sender with a recorder; ``/update_weights`` records the announced metadata.

The "model" is deterministic. Each token is drawn from the weights held *at that moment*:
content token ``i`` is ``1000 * (version + 1) + (seed + i) % 900`` (``version`` counts the
weight updates received, ``seed`` comes from the prompt), so a turn that spans an update shows
two versions (:func:`token_version`). After ``reply_tokens`` tokens it writes ``eot_token_id``,
its end-of-turn token, but like a model whose EOS is another token it stops there only when the
request lists it in ``stop_token_ids``; otherwise it runs on to ``max_tokens``. The logprob of
token ``t`` is :func:`fake_logprob`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl_envs.stack import ServerThread

__all__ = ["FakeVLLM", "fake_logprob", "token_version"]


def fake_logprob(token: int) -> float:
    return -((token % 1000) + 1) / 1000.0


def token_version(token: int) -> int:
    """The weight version a content token was generated with (-1 for special tokens)."""
    return token // 1000 - 1


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}.get(status, "Error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status_code=status)


@dataclass
class FakeVLLM:
    """The fake's settings and state; :meth:`start` serves it on a free loopback port."""

    model: str = "fake/agent-model"
    max_model_len: int = 64
    report_max_model_len: bool = True  # False: /v1/models and /server_info leave it out
    logprobs_mode: str = "processed_logprobs"
    weight_transfer: bool = True
    dev_mode: bool = True
    world_size: int = 1
    eot_token_id: int = 2
    reply_tokens: int = 6
    token_delay_s: float = 0.0
    version: int = 0  # weight updates received
    fail_next: list[int] = field(default_factory=list)  # statuses for the next completions to answer with
    events: list[tuple[str, Any]] = field(default_factory=list)  # (what, detail), in order
    requests: list[dict[str, Any]] = field(default_factory=list)  # completion bodies
    generating: threading.Event = field(default_factory=threading.Event)  # set while a turn runs
    running: int = 0
    paused: bool = False
    pause_mode: str = ""
    updating: bool = False
    server: ServerThread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def start(self) -> FakeVLLM:
        self.server = ServerThread(self.app()).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def log(self, what: str, detail: Any = None) -> None:
        self.events.append((what, detail))

    def names(self) -> list[str]:
        return [what for what, _ in self.events]

    # ------------------------------------------------------------------ the model

    async def _sample(self, prompt: list[int], max_tokens: int, stop_ids: set[int]) -> tuple[list[int], str, int | None]:
        seed = sum(prompt) % 97
        ids: list[int] = []
        self.running += 1
        self.generating.set()
        try:
            for i in range(max_tokens):
                while self.paused and self.pause_mode != "abort":  # a kept request waits for /resume
                    await asyncio.sleep(0.005)
                if self.paused and self.pause_mode == "abort":
                    return ids, "abort", None
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                token = self.eot_token_id if i == self.reply_tokens else 1000 * (self.version + 1) + (seed + i) % 900
                ids.append(token)
                if token in stop_ids:
                    return ids, "stop", token
            return ids, "length", None
        finally:
            self.running -= 1
            if self.running == 0:
                self.generating.clear()

    def _too_long(self, prompt: list[int], max_tokens: int) -> JSONResponse | None:
        if len(prompt) + max_tokens <= self.max_model_len:
            return None
        return _error(
            400,
            f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {len(prompt)} input tokens, for a total of "
            f"{len(prompt) + max_tokens} tokens. Please reduce the length of the input prompt or the number of "
            "requested output tokens.",
            "input_tokens",
        )

    # ------------------------------------------------------------------ the app

    def app(self) -> FastAPI:  # noqa: C901 - one route per endpoint
        app = FastAPI()

        def dev() -> JSONResponse | None:
            return None if self.dev_mode else _error(404, "Not Found")

        @app.get("/health")
        async def health() -> JSONResponse:
            return JSONResponse({})

        @app.get("/v1/models")
        async def models() -> JSONResponse:
            card: dict[str, Any] = {"id": self.model, "object": "model", "owned_by": "vllm", "root": self.model}
            if self.report_max_model_len:
                card["max_model_len"] = self.max_model_len
            return JSONResponse({"object": "list", "data": [card]})

        @app.get("/server_info")
        async def server_info(config_format: str = "text") -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            model_config: dict[str, Any] = {"model": self.model, "logprobs_mode": self.logprobs_mode}
            if self.report_max_model_len:
                model_config["max_model_len"] = self.max_model_len
            config = {
                "model_config": model_config,
                "parallel_config": {"tensor_parallel_size": self.world_size, "data_parallel_size": 1},
                "weight_transfer_config": {"backend": "nccl"} if self.weight_transfer else None,
            }
            body = config if config_format == "json" else str(config)
            return JSONResponse({"vllm_config": body, "vllm_env": {"VLLM_SERVER_DEV_MODE": "1"}, "system_env": {}})

        @app.get("/get_world_size")
        async def get_world_size() -> JSONResponse:
            return dev() or JSONResponse({"world_size": self.world_size})

        @app.post("/v1/completions")
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            if self.fail_next:
                return _error(self.fail_next.pop(0), "injected failure")
            if body.get("n", 1) != 1:
                return _error(400, "the fake serves n=1 only", "n")
            prompts = body["prompt"]
            prompts = prompts if prompts and isinstance(prompts[0], list) else [prompts]
            max_tokens = int(body.get("max_tokens") or 16)
            for prompt in prompts:
                if (too_long := self._too_long(prompt, max_tokens)) is not None:
                    return too_long
            stop_ids = set(body.get("stop_token_ids") or [])
            choices = []
            for index, prompt in enumerate(prompts):
                self.log("gen_start", index)
                ids, finish, stop_reason = await self._sample(prompt, max_tokens, stop_ids)
                self.log("gen_end", ids)
                choice: dict[str, Any] = {
                    "index": index,
                    "text": " ".join(f"t{t}" for t in ids),
                    "finish_reason": finish,
                    "stop_reason": stop_reason,
                    "logprobs": None,
                }
                if body.get("logprobs") is not None:
                    names = [f"token_id:{t}" if body.get("return_tokens_as_token_ids") else f"t{t}" for t in ids]
                    choice["logprobs"] = {
                        "text_offset": list(range(len(ids))),
                        "token_logprobs": [fake_logprob(t) for t in ids],
                        "tokens": names,
                        "top_logprobs": [{n: fake_logprob(t)} for n, t in zip(names, ids, strict=True)],
                    }
                if body.get("return_token_ids"):
                    choice["prompt_token_ids"] = prompt
                    choice["token_ids"] = ids
                choices.append(choice)
            completion = sum(len(c["logprobs"]["tokens"]) if c["logprobs"] else 0 for c in choices)
            return JSONResponse(
                {
                    "id": f"cmpl-{len(self.requests)}",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": self.model,
                    "choices": choices,
                    "usage": {"prompt_tokens": sum(map(len, prompts)), "completion_tokens": completion},
                }
            )

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            prompt = [3] + [10 + sum(map(ord, str(m.get("content", "")))) % 900 for m in body["messages"]]
            max_tokens = int(body.get("max_tokens") or 16)
            if (too_long := self._too_long(prompt, max_tokens)) is not None:
                return too_long
            ids, finish, stop_reason = await self._sample(prompt, max_tokens, set(body.get("stop_token_ids") or []))
            logprobs = None
            if body.get("logprobs"):
                logprobs = {
                    "content": [
                        {"token": f"token_id:{t}", "logprob": fake_logprob(t), "bytes": None, "top_logprobs": []} for t in ids
                    ]
                }
            message = {"role": "assistant", "content": " ".join(f"t{t}" for t in ids), "tool_calls": []}
            choice = {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": stop_reason,
                "token_ids": ids,
            }
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": self.model,
                    "choices": [choice],
                    "prompt_token_ids": prompt,
                }
            )

        @app.post("/init_weight_transfer_engine")
        async def init_weight_transfer_engine(request: Request) -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            info = (await request.json()).get("init_info")
            if info is None:
                return _error(400, "Missing 'init_info' in request body")
            self.log("init_weight_transfer_engine", info)
            return JSONResponse({"message": "Weight transfer initialized"})

        @app.post("/start_weight_update")
        async def start_weight_update() -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            self.updating = True
            self.log("start_weight_update")
            return JSONResponse({"message": "Weight update started"})

        @app.post("/update_weights")
        async def update_weights(request: Request) -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            info = (await request.json()).get("update_info")
            if info is None:
                return _error(400, "Missing 'update_info' in request body")
            if not self.updating:
                return _error(400, "update_weights outside start_weight_update/finish_weight_update")
            # the workers load each tensor as it arrives: from here on the model is the new one
            self.version += 1
            self.log("update_weights", info)
            return JSONResponse({"message": "Weights updated"})

        @app.post("/finish_weight_update")
        async def finish_weight_update(request: Request) -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            body = await request.json() if await request.body() else {}
            self.updating = False
            self.log("finish_weight_update", body.get("weight_version"))
            return JSONResponse({"message": "Weight update finished"})

        @app.post("/reset_prefix_cache")
        async def reset_prefix_cache() -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            self.log("reset_prefix_cache", self.running)
            return JSONResponse({"success": self.running == 0})  # blocks held by running requests

        @app.post("/pause")
        async def pause(mode: str = "abort") -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            if mode not in ("abort", "wait", "keep"):
                return _error(400, f"unknown pause mode {mode!r}", "mode")
            self.log("pause", mode)
            self.pause_mode, self.paused = mode, True
            while mode == "wait" and self.running:
                await asyncio.sleep(0.005)
            return JSONResponse({"status": "paused"})

        @app.post("/resume")
        async def resume() -> JSONResponse:
            if (refused := dev()) is not None:
                return refused
            self.paused = False
            self.log("resume")
            return JSONResponse({"status": "resumed"})

        @app.get("/is_paused")
        async def is_paused() -> JSONResponse:
            return dev() or JSONResponse({"is_paused": self.paused})

        return app
