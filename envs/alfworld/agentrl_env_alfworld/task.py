"""``alfworld``: AgentBench's FC ALFWorld task — a household text game, one action per turn.

The model gets AgentBench's system prompt and ``Here is your task. `` + the game's intro + the
admissible commands, and acts with ``take_action(action)``: free text, mapped to the closest
admissible command as AgentBench does (:mod:`.actions`); the tool answers the game's own
observation (``Nothing happens.`` when the action is not possible) and the actions now available.
The episode ends with reward 1 when the game is won (the engine's ``won``), with reward 0 and
``agent invalid action`` when the model repeats an action three times (AgentBench's rule), or at
the 20-round limit (``task limit reached``).

Games are ALFWorld's own engine (TextWorld's ``PddlEnv`` with ALFWorld's domain and grammar)
playing generated problems (:mod:`.scenes`) or ALFWorld's game files (``data=PATH``); they run in
engine processes shared by the worker's sessions (:mod:`.pool`).

Easy games (samples with ``"prompt": "easy"``, the ``easy*`` splits of :mod:`.make_easy`) open
with a short prompt and a worked example, and every message shows the game's text without the
available actions, then the next action of the sample's ``plan`` (:func:`.prompts.next_action`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agentrl_envs.protocol.agentrl import SampleStatus
from agentrl_envs.task import Task, TaskConfig, tool

from .actions import process_action, repeated_three_times
from .pool import EnginePool, Lease
from .prompts import NO_TOOL_CALL, easy_message, next_action, observation_message, opening_messages, process_ob
from .reference import reference_policy
from .samples import EASY_SPLITS, SPLITS, load_data, load_split, validate_sample


class ALFWorldConfig(TaskConfig):
    """Options of the ALFWorld task.

    Engine:
        processes: engine processes per worker (sessions spread over them); unset: one per core;
            0: play in the worker process itself.
        logic: the domain and grammar of generated games: ``agentbench`` (ALFWorld 2.1.1's, which
            AgentBench's games carry: ``put X in/on Y``, ``You arrive at loc N.``) or
            ``alfworld`` (the installed wheel's 2.1.2: ``move X to Y``, a ``help`` command).

    Limits:
        max_turns: round limit of every session (unset: 20, AgentBench's ``max_step``).
    """

    processes: int | None = Field(None, ge=0, description="Engine processes (unset: one per core; 0: in the worker).")
    logic: Literal["agentbench", "alfworld"] = Field(
        "agentbench", description="Logic of generated games: 'agentbench' (ALFWorld 2.1.1) or 'alfworld' (2.1.2)."
    )


class ALFWorldTask(Task):
    name = "alfworld"
    max_turns = 20
    splits = (*SPLITS, *EASY_SPLITS)
    concurrency = 32
    Config = ALFWorldConfig

    # ------------------------------------------------------------------ data

    load_split = staticmethod(load_split)  # generated (dev, test, train) or shipped (easy*)
    load_data = staticmethod(load_data)  # ALFWorld's own games

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        return validate_sample(custom_task, "custom_task")

    #: the scene-aware expert (generated games) or the game's stored walkthrough (game files)
    reference_policy = staticmethod(reference_policy)

    @classmethod
    async def open_resources(cls, config: BaseModel) -> EnginePool:
        assert isinstance(config, ALFWorldConfig)
        return EnginePool(config.processes)

    # ------------------------------------------------------------------ session

    def __init__(self, sample: dict[str, Any], *, config: BaseModel | None = None, resources: Any = None) -> None:
        super().__init__(sample, config=config, resources=resources)
        self.lease: Lease | None = None
        self.commands: list[str] = []
        self.actions: list[str] = []
        #: an easy game's winning actions and how many of them were taken in order
        self.plan: list[str] | None = sample.get("plan") if sample.get("prompt") == "easy" else None
        self.plan_done = 0

    async def setup(self) -> list[dict[str, Any]]:
        pool = self.resources
        if pool is None:
            raise RuntimeError("the ALFWorld task needs its engine pool: open it with TaskRuntime.open() / open_resources")
        if "game_file" in self.sample:
            source: dict[str, Any] = {"game_file": self.sample["game_file"]}
        else:
            assert isinstance(self.config, ALFWorldConfig)
            source = {"spec": self.sample, "logic": self.config.logic}
        self.lease, observation = await pool.start(source)
        self.commands = observation.commands
        self.metrics["task_type"] = self.sample.get("task_type")
        return opening_messages(observation.text, observation.commands, self.sample)

    async def teardown(self) -> None:
        if self.lease is not None:
            lease, self.lease = self.lease, None
            await self.resources.release(lease)

    def no_tool_call_message(self) -> str:
        return NO_TOOL_CALL

    @tool
    async def take_action(self, action: str) -> str:
        """Take an action.

        Args:
            action: The action you would like to take
        """
        assert self.lease is not None
        command = process_action(action, self.commands)
        observation = await self.resources.step(self.lease, command)
        self.commands = observation.commands
        self.actions.append(action)
        if self.plan is not None and self.plan_done < len(self.plan) and command == self.plan[self.plan_done]:
            self.plan_done += 1
        if repeated_three_times(self.actions):
            self.finish(0.0, status=SampleStatus.AGENT_INVALID_ACTION, won=False, repeated=action)
        elif observation.won:
            self.finish(1.0, won=True)
        if self.plan is not None:
            hint = None if self.done else next_action(self.plan, self.plan_done, self.commands)
            return easy_message(process_ob(observation.text), hint)
        return observation_message(observation.text, observation.commands)
