"""The ALFWorld task's reference: an expert that knows the generated scene and reads what it is told.

ALFWorld's own planner (``policy_commands``: Fast Downward's search) takes seconds to minutes and
gigabytes on two-object games, so the expert plans from the generated scene instead: where the
target objects, the appliance, the lamp and the goal receptacle are, and what each is called in
the game (the names come from ALFWorld's own ``Demangler`` over the problem's ids, as the engine
names them). Each turn it reads the AVAILABLE ACTIONS of the last observation: an ``open`` of a
receptacle that is already open is skipped, a put is sent in the form the game's grammar offers
(``put X in/on Y`` in 2.1.1 games, ``move X to Y`` in 2.1.2 ones), and a planned action that the
game does not offer stops the policy (the check then reports the sample as unsolved).

For real ALFWorld games (``game_file`` samples) the game's stored ``walkthrough`` (written by
ALFWorld's generator) is the reference, sent as it is.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from agentrl_envs.policy import call_turn

from .prompts import NEXT_ACTION, parse_available_actions
from .scenes import APPLIANCE, Game, Receptacle, Thing, build_game, mangle

TOOL = "take_action"


def display_names(game: Game) -> dict[str, str]:
    """ALFRED id → the name the game shows (``cabinet 3``), by ALFWorld's ``Demangler``."""
    from alfworld.agents.utils.misc import Demangler

    ids = [r.id for r in game.receptacles] + [t.id for t in game.things]
    ids += [r.location for r in game.receptacles] + ["loc|99|99|0|30"]
    lowered = {i: mangle(i).lower() for i in ids}
    demangler = Demangler(game_infos={k: SimpleNamespace(id=k) for k in set(lowered.values())})
    return {i: demangler.demangle_alfred_name(k).strip() for i, k in lowered.items()}


class _Plan:
    """Builds the expert's steps: ``("do", command)``, ``("open", recep)``, ``("put", obj, recep)``."""

    def __init__(self, game: Game) -> None:
        self.game = game
        self.names = display_names(game)
        self.steps: list[tuple[str, ...]] = []
        self.at: str | None = None

    def name(self, thing_or_recep: Thing | Receptacle) -> str:
        return self.names[thing_or_recep.id]

    def go(self, r: Receptacle) -> None:
        if self.at != r.id:
            self.steps.append(("do", f"go to {self.name(r)}"))
            self.at = r.id
        if r.openable:
            self.steps.append(("open", self.name(r)))

    def fetch(self, t: Thing) -> None:
        r = self.game.receptacle(t.receptacle)
        self.go(r)
        self.steps.append(("do", f"take {self.name(t)} from {self.name(r)}"))

    def place(self, t: Thing, r: Receptacle) -> None:
        self.go(r)
        self.steps.append(("put", self.name(t), self.name(r)))


def expert_steps(game: Game) -> list[tuple[str, ...]]:
    """The expert's plan for a generated game."""
    spec = game.spec
    plan = _Plan(game)
    targets = sorted((t for t in game.things if t.type == spec["object"]), key=plan.name)
    # The goal receptacle: one of the goal type, a non-openable one if there is (fewer steps).
    dests = sorted((r for r in game.receptacles if r.type == spec.get("receptacle")), key=lambda r: (r.openable, plan.name(r)))
    task_type = spec["task_type"]
    if task_type == "look_at_obj_in_light":
        lamp = next(t for t in game.things if t.type == spec["toggle"])
        plan.fetch(targets[0])
        plan.go(game.receptacle(lamp.receptacle))
        plan.steps.append(("do", f"use {plan.name(lamp)}"))
    elif task_type == "pick_two_obj_and_place":
        for t in targets[:2]:
            plan.fetch(t)
            plan.place(t, dests[0])
    else:
        plan.fetch(targets[0])
        if task_type in APPLIANCE:
            rtype, verb, _ = APPLIANCE[task_type]
            appliance = sorted((r for r in game.receptacles if r.type == rtype), key=plan.name)[0]
            plan.go(appliance)
            plan.steps.append(("do", f"{verb} {plan.name(targets[0])} with {plan.name(appliance)}"))
        plan.place(targets[0], dests[0])
    return plan.steps


def _latest_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") in ("tool", "user") and isinstance(m.get("content"), str):
            return m["content"]
    return ""


class ExpertPolicy:
    """Plays :func:`expert_steps`, checking each command against the observation's actions."""

    def __init__(self, steps: list[tuple[str, ...]]) -> None:
        self.steps = list(steps)

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        available = parse_available_actions(_latest_text(messages))
        while self.steps:
            step = self.steps.pop(0)
            if step[0] == "open":
                command = f"open {step[1]}"
                if command not in available:
                    continue  # already open
            elif step[0] == "put":
                forms = (f"put {step[1]} in/on {step[2]}", f"move {step[1]} to {step[2]}")
                command = next((f for f in forms if f in available), forms[0])
            else:
                command = step[1]
            if command not in available:
                return None  # the game does not offer what the plan needs: give up, visibly
            return call_turn(TOOL, {"action": command})
        return None


class NextActionPolicy:
    """The easy games' reference: sends the action that the latest message spells out
    (``Next action: ...``), what the easy prompt asks of the model; stops when there is none."""

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        _, sep, action = _latest_text(messages).rpartition("\n" + NEXT_ACTION)
        return call_turn(TOOL, {"action": action}) if sep else None


def reference_policy(sample: dict[str, Any]) -> ExpertPolicy | NextActionPolicy | list[dict[str, Any]] | None:
    """A fresh expert for a generated game (an easy one: what its messages spell out); the stored
    walkthrough of a real game file, if any."""
    if sample.get("prompt") == "easy":
        return NextActionPolicy()
    if "game_file" in sample:
        with open(sample["game_file"]) as f:
            walkthrough = json.load(f).get("walkthrough")
        if not walkthrough:
            return None
        return [{"name": TOOL, "arguments": {"action": a}} for a in walkthrough]
    return ExpertPolicy(expert_steps(build_game(sample)))
