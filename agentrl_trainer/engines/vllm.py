"""A vLLM engine: one ``trl vllm-serve`` server on a GPU, spoken to over its HTTP API.

Start one server per engine on a GPU of its own, then the trainer on another GPU::

    CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model <model dir> --port 8000 --max_model_len 4096
    CUDA_VISIBLE_DEVICES=1 agentrl-train --config train.yaml --engine vllm --num_engines 1 \\
        --vllm_server_port 8000 --vllm_group_port 51216

In TRL 1.16 ``trl vllm-serve`` runs vLLM's own server (``vllm serve``) with its development
endpoints on (``VLLM_SERVER_DEV_MODE=1``), NCCL weight transfer
(``--weight-transfer-config '{"backend": "nccl"}'``) and ``--logprobs-mode processed_logprobs``;
starting ``vllm serve`` by hand with those three settings is the same. The command has no
``--group_port``: the trainer names the NCCL rendezvous port when it joins
(``vllm_group_port`` + the engine's index).

The contract (checked against a fake server in ``tests/trainer/test_vllm_contract.py``):

* **Generation** is token in / token out: ``POST /v1/completions`` with the prompt's ids,
  ``return_token_ids`` and ``return_tokens_as_token_ids`` (each logprob names its token id, so
  ids and logprobs are checked to line up), ``logprobs=0`` (the sampled token's logprob), the
  chat template's end-of-turn token as ``stop_token_ids`` (:func:`end_of_turn_token_ids`: a model
  whose EOS is not its end-of-turn token would otherwise run past the turn), and top-k, min-p and
  repetition penalty set to neutral so that the model's ``generation_config`` cannot add filters
  the trainer does not apply.
* **Logprobs** are compared by the PPO ratio with log softmax(logits / temperature) from the
  trainer; vLLM returns that only in ``processed_logprobs`` mode, which is checked at start
  (``GET /server_info``): a server in another mode is refused. (Processed logprobs are also
  renormalized over the top-p nucleus, so they agree with the trainer's only at ``top_p`` 1.)
* **Weights** (:meth:`VLLMEngine.load_weights`): new turns wait, the turns in flight finish
  (drain), the server is paused (``/pause?mode=wait``, for its other clients), then one
  ``start_weight_update``, one ``update_weights`` announcing every tensor while one packed
  NCCL stream carries them (:class:`NcclWeightSender`), ``finish_weight_update``,
  ``reset_prefix_cache`` (no cached prefix computed with the old weights survives), ``resume``.
  So no turn mixes two weight versions, and each turn's version is the one in force while it
  was generated: :attr:`VLLMEngine.version` read by the task that just generated is that turn's.
* **Errors** are classified by who is at fault (``agentrl_envs.errors``): a prompt over the
  server's ``max_model_len`` is the model's (``ContextLimitError``: the episode ends
  ``agent context limit``, scored), the turn's ``max_tokens`` is cut to what fits; a transport
  failure, a 5xx or an aborted turn is the infrastructure's (``ModelServerError``: the episode is
  replayed, then dropped); a server set up wrongly or a request it refuses otherwise raises
  :class:`VLLMEngineError` and stops training with the fix.
* **Grammar** (``constrain_tool_calls``) is refused, see :data:`GRAMMAR_REFUSAL`.

The NCCL broadcast needs vLLM and CUDA in the trainer's process; it sits behind the
:class:`WeightSender` seam, which the contract test replaces with a recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol

import httpx
import torch

from agentrl_envs.errors import ContextLimitError, ModelServerError

from ..rollout import TurnSample
from .busy import BusyClock

__all__ = ["GRAMMAR_REFUSAL", "NcclWeightSender", "VLLMEngine", "VLLMEngineError", "WeightSender", "end_of_turn_token_ids"]

log = logging.getLogger(__name__)

LOGPROBS_MODE = "processed_logprobs"

GRAMMAR_REFUSAL = (
    "constrain_tool_calls is not supported with the vLLM engine: vLLM serves grammars "
    "(structured_outputs), but it masks the logits with the grammar before it computes logprobs, so "
    "the logprobs it returns are the constrained distribution's, not the policy's that the trainer's "
    "PPO ratio recomputes (the transformers engine returns the unconstrained ones). Use "
    "--engine transformers for constrained tool calls, or set constrain_tool_calls false."
)

_CONTEXT_PHRASES = ("maximum context length", "max_model_len", "maximum model length", "context length")


class VLLMEngineError(RuntimeError):
    """The server cannot serve this trainer as it is set up (wrong logprob mode, no development
    endpoints, no weight transfer, a request it refuses): training stops with the fix. Never an
    infrastructure failure, which would be replayed and then dropped, episode after episode."""


def end_of_turn_token_ids(tokenizer: Any) -> list[int]:
    """The ids that end an assistant turn: the special token the chat template writes right after
    an assistant message (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``) and the EOS token."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    marker = "AGENTRL_MARKER_7f3a"
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}], tokenize=False
        )
    except Exception as e:  # no chat template, or one that wants other roles
        log.warning("no end-of-turn token from the chat template (%s); stopping on EOS only", e)
        return sorted(ids)
    at = text.rfind(marker)
    tail = list(tokenizer(text[at + len(marker) :], add_special_tokens=False)["input_ids"]) if at >= 0 else []
    special = set(tokenizer.all_special_ids) | {
        int(i) for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if getattr(t, "special", False)
    }
    if tail and tail[0] in special:
        ids.add(int(tail[0]))
    return sorted(ids)


class WeightSender(Protocol):
    """The trainer's end of the weight-transfer group: the NCCL broadcast itself.

    ``init_extra`` / ``update_extra``: fields the server's weight-transfer engine wants in
    ``init_info`` / ``update_info`` for this sender's wire format."""

    init_extra: dict[str, Any]
    update_extra: dict[str, Any]

    def open(self, init_info: dict[str, Any]) -> None:
        """Join the group (the server joins it concurrently, in ``/init_weight_transfer_engine``)."""
        ...

    def send(self, named: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Broadcast the tensors, in order (the server receives them in ``/update_weights``)."""
        ...

    def close(self) -> None: ...


class NcclWeightSender:
    """:class:`WeightSender` over vLLM's NCCL weight-transfer engine (the trainer is rank 0; tensors
    are packed into a few broadcasts). Needs vllm and a CUDA device in the trainer's process."""

    def __init__(self, device: torch.device | int | None = None) -> None:
        try:
            from vllm.distributed.weight_transfer.nccl_common import trainer_init
            from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

            self._init, self._broadcast, self._legacy = trainer_init, packed_nccl_broadcast_producer, None
            # vLLM >= 0.28: a stateful trainer engine, "packed" chosen once at init
            self.init_extra, self.update_extra = {"packed": True}, {}
        except ImportError:
            try:
                from vllm.distributed.weight_transfer import nccl_engine
            except ImportError as e:
                raise VLLMEngineError(
                    "weight sync to a vLLM server needs vllm installed in the trainer's environment "
                    "(pip install 'agentrl-trainer[vllm]') and a CUDA device"
                ) from e
            self._legacy = nccl_engine
            self.init_extra, self.update_extra = {}, {"packed": True}
        if not torch.cuda.is_available():
            raise VLLMEngineError("weight sync to a vLLM server broadcasts over NCCL and needs a CUDA device")
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None else device)
        self.group: Any = None

    def open(self, init_info: dict[str, Any]) -> None:
        torch.cuda.set_device(self.device)
        if self._legacy is None:
            self.group = self._init(init_info)
        else:
            self.group = self._legacy.NCCLWeightTransferEngine.trainer_init(init_info)

    def send(self, named: Iterator[tuple[str, torch.Tensor]]) -> None:
        on_device = ((n, t.to(self.device, non_blocking=True).contiguous()) for n, t in named)
        if self._legacy is None:
            self._broadcast(iterator=on_device, group=self.group, src=0, post_iter_func=lambda item: item[1])
        else:
            args = self._legacy.NCCLTrainerSendWeightsArgs(group=self.group, packed=True)
            self._legacy.NCCLWeightTransferEngine.trainer_send_weights(iterator=on_device, trainer_args=args)

    def close(self) -> None:
        self.group = None


class _DrainGate:
    """Admits turns while no weight update runs; :meth:`closed` waits for the admitted ones to end.

    Turns run on the rollout's event loop and updates on the trainer's thread, so the state sits
    under a ``threading.Condition``; a turn that arrives during an update awaits a future that the
    update resolves through the turn's own loop when it ends. ``version`` changes only while closed.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.version = 0

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[int]:
        """Hold the gate open for one turn; yields the weight version the turn is generated with."""
        while True:
            with self._cond:
                if not self._closed:
                    self._inflight += 1
                    version = self.version
                    break
                loop = asyncio.get_running_loop()
                reopened: asyncio.Future[None] = loop.create_future()
                self._waiting.append((loop, reopened))
            await reopened
        try:
            yield version
        finally:
            with self._cond:
                self._inflight -= 1
                if self._inflight == 0:
                    self._cond.notify_all()

    @contextmanager
    def closed(self, timeout: float) -> Iterator[None]:
        """No turn is running inside; new ones wait until the block ends."""
        with self._cond:
            if self._closed:
                raise RuntimeError("two weight updates at once on one engine")
            self._closed = True
            drained = self._cond.wait_for(lambda: self._inflight == 0, timeout)
        try:
            if not drained:
                raise VLLMEngineError(f"turns still running {timeout:.0f} s after a weight update began")
            yield
        finally:
            with self._cond:
                self._closed = False
                waiting, self._waiting = self._waiting, []
            for loop, reopened in waiting:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
                    loop.call_soon_threadsafe(_resolve, reopened)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # a cancelled waiter
        future.set_result(None)


def _error_text(response: httpx.Response) -> str:
    """The message of a vLLM error body (``{"error": {"message": ...}}``), else the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(error or body)[:500]


class VLLMEngine:
    """One ``trl vllm-serve`` server (see the module docstring for the contract).

    ``tokenizer``: the trainer's, for the end-of-turn token. ``timeout``: how long to wait for the
    server to come up. ``sender``: the NCCL side of weight sync (default :class:`NcclWeightSender`);
    ``sync_weights=False`` opens no weight transfer (generation only, e.g. evaluation).
    """

    merged_weights = True  # load_weights wants full tensors by base-model names

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8000,
        group_port: int = 51216,
        *,
        tokenizer: Any = None,
        base_url: str | None = None,
        timeout: float = 240.0,
        request_timeout: float = 600.0,
        weight_sync_timeout: float = 1800.0,
        sender: WeightSender | None = None,
        sync_weights: bool = True,
    ) -> None:
        self.base_url = (base_url or f"http://{host}:{port}").rstrip("/")
        self.group_port = group_port
        self.request_timeout = request_timeout
        self.weight_sync_timeout = weight_sync_timeout
        # trust_env off: a proxy from the environment must not sit between the trainer and its server
        self._http = httpx.Client(base_url=self.base_url, timeout=request_timeout, trust_env=False)
        self._aclients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._wait_until_up(timeout)
        card = self._get("/v1/models")["data"][0]
        self.model: str = card["id"]
        config = self._server_config()
        model_config = config.get("model_config") or {}
        mode = model_config.get("logprobs_mode")
        if mode != LOGPROBS_MODE:
            raise VLLMEngineError(
                f"the vLLM server at {self.base_url} returns logprobs in {mode!r} mode; the trainer's PPO ratio "
                f"compares them with log softmax(logits / temperature), which only {LOGPROBS_MODE!r} returns. "
                f"Restart it with `trl vllm-serve` or `vllm serve ... --logprobs-mode {LOGPROBS_MODE}`"
            )
        max_len = card.get("max_model_len") or model_config.get("max_model_len")
        self.max_model_len: int | None = int(max_len) if max_len else None
        self.stop_token_ids: list[int] = end_of_turn_token_ids(tokenizer) if tokenizer is not None else []
        self._gate = _DrainGate()
        self._turn_version: contextvars.ContextVar[int] = contextvars.ContextVar(f"vllm_turn_version_{id(self)}")
        self._broken: BaseException | None = None
        self._clock = BusyClock()
        self._pause_supported = True
        self.weight_updates = 0
        self.sender: WeightSender | None = None
        if sync_weights:
            if config.get("weight_transfer_config") is None:
                raise VLLMEngineError(
                    f"the vLLM server at {self.base_url} has no weight-transfer engine, so the trainer cannot "
                    """send it new weights; restart it with `trl vllm-serve` or `--weight-transfer-config '{"backend": "nccl"}'`"""
                )
            self._open_weight_transfer(sender if sender is not None else NcclWeightSender())

    # ------------------------------------------------------------------ set-up

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise ModelServerError(f"the vLLM server at {self.base_url} did not answer /health within {timeout:.0f} s")
            time.sleep(min(1.0, max(timeout / 20, 0.05)))

    def _server_config(self) -> dict[str, Any]:
        response = self._http.get("/server_info", params={"config_format": "json"})
        if response.status_code == 404:
            raise VLLMEngineError(
                f"the vLLM server at {self.base_url} has no development endpoints (/server_info, weight updates, "
                "pause); start it with `trl vllm-serve`, or `vllm serve` with VLLM_SERVER_DEV_MODE=1"
            )
        return dict(self._checked(response, "/server_info")["vllm_config"])

    def _open_weight_transfer(self, sender: WeightSender) -> None:
        world_size = int(self._get("/get_world_size")["world_size"]) + 1  # the server's workers + this trainer
        init_info = {
            "master_address": _address_towards(self._http.base_url.host),
            "master_port": self.group_port,
            "rank_offset": 1,  # the trainer is rank 0
            "world_size": world_size,
            **sender.init_extra,
        }
        # The server blocks in the rendezvous while it answers, so the trainer joins meanwhile.
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(self._post, "/init_weight_transfer_engine", {"init_info": init_info}, self.weight_sync_timeout)
            sender.open(init_info)
            answer.result()
        self.sender = sender

    # ------------------------------------------------------------------ HTTP

    def _checked(self, response: httpx.Response, what: str) -> Any:
        if response.status_code != 200:
            message = f"{what} on the vLLM server at {self.base_url}: HTTP {response.status_code}: {_error_text(response)}"
            raise (ModelServerError if response.status_code >= 500 else VLLMEngineError)(message)
        return response.json() if response.content else {}

    def _get(self, path: str) -> Any:
        return self._checked(self._http.get(path), path)

    def _post(self, path: str, body: Any = None, timeout: float | None = None, **params: Any) -> Any:
        response = self._http.post(path, json=body, params=params or None, timeout=timeout or self.request_timeout)
        return self._checked(response, path)

    def _aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
            client = httpx.AsyncClient(base_url=self.base_url, timeout=self.request_timeout, limits=limits, trust_env=False)
            self._aclients[loop] = client
        return client

    # ------------------------------------------------------------------ generation

    @property
    def version(self) -> int:
        """The weights version that generated the calling task's last turn on this engine (what the
        rollout labels that turn with), else the version the server holds now."""
        return self._turn_version.get(self._gate.version)

    @property
    def busy_seconds(self) -> float:
        """Wall time with at least one generation in flight, the current busy period included."""
        return self._clock.seconds

    async def generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        temperature: float,
        top_p: float,
        tools: Any = None,
        *,
        call_required: bool = True,
        close_in_budget: bool = False,
        seed: int | None = None,
    ) -> TurnSample:
        """Sample one turn: its ids, their logprobs and the version of the weights that sampled it;
        see the module docstring. ``seed`` goes to vLLM's per-request seed. ``call_required`` and
        ``close_in_budget`` qualify a grammar, which this engine refuses, so they are ignored."""
        if tools:
            raise VLLMEngineError(GRAMMAR_REFUSAL)
        if self._broken is not None:
            raise VLLMEngineError(
                f"a weight update to {self.base_url} failed half-way; its weights are unknown"
            ) from self._broken
        prompt = [int(t) for t in prompt_ids]
        limit = max_tokens
        if self.max_model_len is not None:
            room = self.max_model_len - len(prompt)
            if room < 1:
                raise ContextLimitError(
                    f"the prompt has {len(prompt)} tokens; the vLLM server's max_model_len is {self.max_model_len}",
                    prompt_tokens=len(prompt),
                    max_context=self.max_model_len,
                )
            limit = min(max_tokens, room)
        body = {
            "model": self.model,
            "prompt": [prompt],
            "max_tokens": limit,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "n": 1,
            "logprobs": 0,
            "stop_token_ids": self.stop_token_ids,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if seed is not None:
            body["seed"] = seed
        async with self._gate.turn() as version:
            with self._clock.busy():
                answer = await self._complete(body, len(prompt))
        ids, logprobs = self._parse(answer)
        self._turn_version.set(version)
        return TurnSample(ids, logprobs, version)

    async def _complete(self, body: dict[str, Any], prompt_tokens: int) -> dict[str, Any]:
        try:
            response = await self._aclient().post("/v1/completions", json=body)
        except httpx.TransportError as e:  # refused, reset, timed out
            raise ModelServerError(f"the vLLM server at {self.base_url} failed: {type(e).__name__}: {e}") from e
        if response.status_code == 200:
            try:
                return dict(response.json())
            except ValueError as e:
                raise ModelServerError(f"the vLLM server at {self.base_url} sent a body that is not JSON") from e
        message = _error_text(response)
        if response.status_code == 400 and any(p in message.lower() for p in _CONTEXT_PHRASES):
            raise ContextLimitError(message, prompt_tokens=prompt_tokens, max_context=self.max_model_len)
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise ModelServerError(f"the vLLM server at {self.base_url} failed: HTTP {response.status_code}: {message}")
        raise VLLMEngineError(f"the vLLM server at {self.base_url} refused a turn: HTTP {response.status_code}: {message}")

    def _parse(self, answer: dict[str, Any]) -> tuple[list[int], list[float]]:
        """Completion ids and the sampled tokens' logprobs, checked to name the same tokens."""
        try:
            choice = answer["choices"][0]
            if choice.get("finish_reason") == "abort":
                raise ModelServerError(f"the vLLM server at {self.base_url} aborted the turn")
            ids = [int(i) for i in choice["token_ids"]]
            tokens, values = choice["logprobs"]["tokens"], choice["logprobs"]["token_logprobs"]
        except (KeyError, IndexError, TypeError) as e:
            raise VLLMEngineError(
                f"the vLLM server at {self.base_url} sent no token_ids/logprobs ({e!r}); it needs return_token_ids "
                "and return_tokens_as_token_ids (vLLM as TRL 1.16 runs it)"
            ) from e
        if (
            len(tokens) != len(ids)
            or len(values) != len(ids)
            or any(t != f"token_id:{i}" for t, i in zip(tokens, ids, strict=True))
        ):
            raise VLLMEngineError(f"the vLLM server at {self.base_url} sent logprobs that do not line up with its token ids")
        if any(v is None or not math.isfinite(v) for v in values):
            raise VLLMEngineError(f"the vLLM server at {self.base_url} sent a missing or non-finite logprob")
        return ids, [float(v) for v in values]

    # ------------------------------------------------------------------ weights

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None:
        """Replace the server's weights by ``named`` (full tensors, base-model names) as ``version``.

        Blocks new turns, waits for the ones in flight, sends everything in one update; see the
        module docstring. A failure half-way leaves the engine refusing to generate.
        """
        if self.sender is None:
            raise VLLMEngineError("this engine was opened with sync_weights=False")
        update_info = {
            "names": list(named),
            "dtype_names": [str(t.dtype).removeprefix("torch.") for t in named.values()],
            "shapes": [list(t.shape) for t in named.values()],
            **self.sender.update_extra,
        }
        with self._gate.closed(self.request_timeout + 30.0):
            paused = self._pause()
            try:
                self._post("/start_weight_update", {})
                with ThreadPoolExecutor(1) as pool:  # the server receives while answering
                    answer = pool.submit(self._post, "/update_weights", {"update_info": update_info}, self.weight_sync_timeout)
                    try:
                        self.sender.send(iter(named.items()))
                    finally:
                        answer.result()
                self._post("/finish_weight_update", {"weight_version": str(version)})
                self._reset_prefix_cache()
                self._gate.version = version
                self.weight_updates += 1
            except BaseException as e:
                self._broken = e
                raise
            finally:
                if paused:
                    self._post("/resume")

    def _pause(self) -> bool:
        """Pause the server (waiting for other clients' requests); False where it has no /pause."""
        if not self._pause_supported:
            return False
        response = self._http.post("/pause", params={"mode": "wait", "wait_for_inflight_requests": "true"})
        if response.status_code == 404:
            log.warning("the vLLM server at %s has no /pause: only this trainer's turns are drained", self.base_url)
            self._pause_supported = False
            return False
        self._checked(response, "/pause")
        return True

    def _reset_prefix_cache(self) -> None:
        for _ in range(20):
            if self._post("/reset_prefix_cache").get("success", True):
                return
            time.sleep(0.1)  # blocks still held by a request finishing
        raise VLLMEngineError(f"the vLLM server at {self.base_url} kept refusing to reset its prefix cache")

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
            self.sender = None
        for loop, client in self._aclients.items():
            if not loop.is_closed() and not loop.is_running():
                with contextlib.suppress(Exception):
                    loop.run_until_complete(client.aclose())
        self._aclients.clear()
        self._http.close()


def _address_towards(host: str) -> str:
    """This machine's address as ``host`` reaches it (the NCCL rendezvous listens on it)."""
    import socket

    if host in ("127.0.0.1", "localhost", "0.0.0.0", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # no packet is sent: this only picks the outgoing interface
        return str(s.getsockname()[0])
