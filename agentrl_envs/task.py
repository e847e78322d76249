"""The task-author API: a task is one class whose tools are typed methods with docstrings.

Example::

    class Echo(Task):
        name = "echo"
        max_turns = 3          # the default round limit; a sample's "max_turns" overrides it
        splits = ("dev",)

        @classmethod
        def load_split(cls, split):  # load_data(cls, path) reads --data PATH
            return [{"word": "hi"}]

        async def setup(self):
            return [{"role": "user", "content": f"Say {self.sample['word']}"}]

        @tool
        def say(self, text: str) -> str:
            '''Say something.

            Args:
                text: What to say.
            '''
            self.finish(1.0 if text == self.sample["word"] else 0.0)
            return "ok"

The SDK derives each tool's OpenAI schema from the signature (types) and the docstring (the first
paragraph is the description, ``Args:`` gives the parameter descriptions), validates the model's
arguments against it, and answers a bad call with a tool message (see :mod:`agentrl_envs.episode`).
Plain ``def`` tools run in a worker thread, ``async def`` tools on the event loop.

One instance serves one session: ``__init__`` gets the sample, the task's config and the
per-worker shared resources (``open_resources``), ``setup`` returns the opening messages,
``teardown`` releases what the session holds. A tool ends the episode with :meth:`Task.finish`.

Episode settings are read per session, never from run-time subclasses: the round limit
(``self.turn_limit``) is the config's ``max_turns`` if the task's ``Config`` declares one (a
:class:`TaskConfig` does) and the operator set it, else the sample's ``max_turns`` (a split's
generator writes it into its samples), else the class default ``max_turns``.

A task proves its rewards with a *reference policy* (:meth:`Task.reference_policy`): given the
conversation so far it returns the next assistant message (see :mod:`agentrl_envs.policy`), so
it can read what the tools answered. A plain list of calls is the trivial policy.
``agentrl-envs check`` plays it through the controller and a worker and expects reward 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, get_type_hints

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .errors import DataError, ToolCallError
from .protocol.agentrl import SampleStatus
from .protocol.openai import Message

if TYPE_CHECKING:
    from .policy import Policy

_TOOL_MARK = "__agentrl_tool__"


def tool(fn: Callable | None = None, *, name: str | None = None) -> Any:
    """Mark a method of a :class:`Task` as a tool the model can call."""

    def mark(f: Callable) -> Callable:
        setattr(f, _TOOL_MARK, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True)
class ToolSpec:
    """A tool derived from a method: its OpenAI definition and its argument model."""

    name: str
    method_name: str
    description: str
    arguments: type[BaseModel]
    is_async: bool

    def definition(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _clean_schema(self.arguments.model_json_schema()),
            },
        }

    def validate(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Validate decoded arguments; raise :class:`ToolCallError` with a readable message."""
        try:
            model = self.arguments.model_validate(raw)
        except ValidationError as e:
            problems = "; ".join(_describe_error(err) for err in e.errors())
            raise ToolCallError(f"Invalid arguments for tool `{self.name}`: {problems}.", tool=self.name) from None
        return {field: getattr(model, field) for field in type(model).model_fields}


def _describe_error(err: dict[str, Any]) -> str:
    where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
    if err.get("type") == "missing":
        return f"missing required argument `{where}`"
    if err.get("type") == "extra_forbidden":
        return f"unexpected argument `{where}`"
    return f"`{where}`: {err.get('msg', 'invalid value')}"


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's titles: OpenAI tool schemas (and AgentBench's) carry none."""
    if isinstance(schema, dict):
        return {k: _clean_schema(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


def _tool_spec(cls: type, method_name: str, tool_name: str) -> ToolSpec:
    fn = getattr(cls, method_name)
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: p.description for p in doc.params}
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == "self":
            continue
        if pname not in hints:
            raise TypeError(f"{cls.__name__}.{method_name}: parameter `{pname}` needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints[pname], Field(default, description=param_docs.get(pname)))
    description = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)
    model = create_model(f"{cls.__name__}_{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return ToolSpec(tool_name, method_name, description, model, inspect.iscoroutinefunction(fn))


class NoConfig(BaseModel):
    """The config of a task that takes no options."""

    model_config = ConfigDict(extra="forbid")


class TaskConfig(BaseModel):
    """Base of a task's options: subclass it for the task's ``Config``.

    It brings ``max_turns``, the operator's round limit for every session (see
    :meth:`Task.resolve_turn_limit`), and refuses unknown options."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int | None = Field(
        None, ge=1, description="Round limit of every session (unset: the sample's max_turns, else the task's default)."
    )


class Task:
    """Base class of every task. Subclass it once per task; see the module docstring."""

    #: Registry name, e.g. ``"db"``.
    name: ClassVar[str] = ""
    #: Default rounds (assistant messages) before the episode is truncated with "task limit
    #: reached"; a session's own limit is ``self.turn_limit`` (see :meth:`resolve_turn_limit`).
    max_turns: ClassVar[int] = 10
    #: The named splits this task ships; any other data comes through ``data=PATH``.
    splits: ClassVar[tuple[str, ...]] = ()
    #: Sessions one worker process serves at once.
    concurrency: ClassVar[int] = 32
    #: Task options (backend, URLs...), a pydantic model; set from CLI ``--option k=v`` or env.
    Config: ClassVar[type[BaseModel]] = NoConfig

    _tool_specs: ClassVar[dict[str, ToolSpec]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, ToolSpec] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                tool_name = getattr(value, _TOOL_MARK, None)
                if tool_name is not None:
                    specs[tool_name] = _tool_spec(cls, attr, tool_name)
        cls._tool_specs = specs

    # ------------------------------------------------------------------ class level: data

    @classmethod
    def load_samples(cls, split: str | None = None, data: str | Path | None = None) -> list[dict[str, Any]]:
        """Return the samples of ``split`` (one of ``splits``; default the first) or of the file/dir ``data``.

        By default ``load_data(data)`` when ``data`` is given, else ``load_split(split)``: a task
        implements those two hooks, or overrides this method."""
        if data is not None:
            return cls.load_data(data)
        if split is None:
            if not cls.splits:
                raise DataError(f"task {cls.name!r} ships no splits: give its samples with data=PATH")
            split = cls.splits[0]
        return cls.load_split(split)

    @classmethod
    def load_split(cls, split: str) -> list[dict[str, Any]]:
        """The samples of the shipped split ``split`` (one of ``splits``)."""
        raise NotImplementedError(f"task {cls.name!r}: implement load_split (or load_samples)")

    @classmethod
    def load_data(cls, data: str | Path) -> list[dict[str, Any]]:
        """The samples of the file or directory ``data`` (``--data PATH``)."""
        raise DataError(f"task {cls.name!r} reads no data files: use one of its splits {list(cls.splits)}")

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        """Turn a client's ``custom_task`` (index -1) into a sample; override to validate."""
        return custom_task

    @classmethod
    def reference_policy(cls, sample: dict[str, Any]) -> Policy | Sequence[dict[str, Any]] | None:
        """How to solve ``sample``: a fresh :class:`~agentrl_envs.policy.Policy` (it sees every
        observation), or the tool calls ``[{"name": ..., "arguments": {...}}, ...]`` to send one
        per turn, or ``None`` when no solution is known for this sample.

        ``agentrl-envs check`` plays it and expects reward 1; samples without one are reported
        apart, never counted as solved or failed. The default: no reference for any sample."""
        return None

    @classmethod
    def resolve_turn_limit(cls, sample: dict[str, Any], config: BaseModel) -> int:
        """The round limit of a session: the config's ``max_turns``, else the sample's, else the class's."""
        for where, value in (("config", getattr(config, "max_turns", None)), ("sample", sample.get("max_turns"))):
            if value is None:
                continue
            if type(value) is not int or value < 1:
                raise DataError(f"task {cls.name!r}: the {where}'s max_turns must be a positive integer, got {value!r}")
            return value
        return cls.max_turns

    @classmethod
    async def open_resources(cls, config: BaseModel) -> Any:
        """Open what all sessions of one worker share (a connection pool...)."""
        return None

    @classmethod
    async def close_resources(cls, resources: Any) -> None:
        """Release what :meth:`open_resources` opened; by default calls its ``close()`` (sync or async)."""
        close = getattr(resources, "close", None)
        if callable(close):
            result = close()
            if inspect.isawaitable(result):
                await result

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        return cls._tool_specs

    @classmethod
    def tool_definitions(cls) -> list[dict[str, Any]]:
        # Built once per class: deriving the JSON schemas was 8% of a worker's CPU under load.
        # The list is new per call; its entries are shared (read-only by contract).
        cached = cls.__dict__.get("_tool_definitions_cache")
        if cached is None:
            cached = [spec.definition() for spec in cls._tool_specs.values()]
            cls._tool_definitions_cache = cached
        return list(cached)

    # ------------------------------------------------------------------ session level

    def __init__(self, sample: dict[str, Any], *, config: BaseModel | None = None, resources: Any = None) -> None:
        self.sample = sample
        self.config = config if config is not None else self.Config()
        self.resources = resources
        self.turn_limit = self.resolve_turn_limit(sample, self.config)
        self.done = False
        self.reward = 0.0
        self.status = SampleStatus.RUNNING
        self.metrics: dict[str, Any] = {}

    async def setup(self) -> list[dict[str, Any]]:
        """Prepare the session and return its opening messages (system, user)."""
        raise NotImplementedError

    async def teardown(self) -> None:
        """Release what the session holds. Called exactly once, however the episode ends."""

    def finish(self, reward: float, *, status: SampleStatus = SampleStatus.COMPLETED, **metrics: Any) -> None:
        """End the episode (call from a tool); the tool's return value is still sent."""
        self.done = True
        self.reward = float(reward)
        self.status = status
        self.metrics.update(metrics)

    async def on_text(self, text: str) -> str | None:
        """Answer an assistant message that calls no tool (``text`` is its content).

        The round counts. Return the user message to send back, or ``None`` for none; a task whose
        episodes end in text (KG's ``Final Answer: #3``) scores it here and calls :meth:`finish`.
        A :class:`~agentrl_envs.errors.ToolCallError` raised here is sent back as ``Error: ...``.
        By default: :meth:`no_tool_call_message`."""
        return self.no_tool_call_message()

    async def on_assistant(self, messages: list[Message]) -> list[dict[str, Any]] | None:
        """Answer the model's assistant message yourself, or return ``None`` (the default) to let
        the SDK run its tool calls (or :meth:`on_text`).

        For a task that follows another harness's rules for a whole message (BFCL decodes all of
        a message's calls at once and ends the user turn when one does not decode). Return the new
        messages: one tool message per tool call (its ``tool_call_id``), then any user message.
        The round counts; anything raised here ends the episode as ``task error``."""
        return None

    def session_tools(self) -> list[dict[str, Any]]:
        """The tools this session offers now: by default the class's :meth:`tool_definitions`.

        A task whose tools depend on the sample, or change during an episode (BFCL's held-back
        functions), overrides it; the episode sends a changed list with the step that changed it."""
        return type(self).tool_definitions()

    def no_tool_call_message(self) -> str:
        """What the model is told when its message calls no tool (the round still counts)."""
        names = ", ".join(f"`{n}`" for n in self._tool_specs)
        return f"No tool call found in your message. Use one of the tools ({names}) to act."
