"""Generated ALFWorld games: a scene over one of ALFRED's room layouts, a goal of one of the six
task types, written as a PDDL problem for ALFWorld's own domain and played by its own engine.

ALFWorld's game release (``json_2.1.1``) cannot be downloaded here, but the ``alfworld`` wheel
ships what a game is made of: the room layouts (``alfworld/gen/layouts``: the object types of each
of the 120 floor plans and the interaction points of their receptacles), the object/receptacle
rules (``alfworld.gen.constants``: what fits where, what can be cleaned, heated, cooled,
toggled), the goals and their text templates (``alfworld.gen.goal_library``) and the PDDL domain
and grammar (``alfworld/data``). A *game spec* (a small JSON dict, the sample) names a floor plan,
a task type, its targets and a seed; :func:`build_game` turns it into the same problem shape as
ALFWorld's ``initial_state.pddl`` (mangled ids such as ``Apple_bar__minus_01_dot_65...``,
``objectType``/``receptacleType``/``inReceptacle``/``canContain``... facts, the goal from the goal
library) plus the scene that the reference policy plans from. Everything is a pure function of
the spec: the same spec gives the same bytes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import alfworld.gen
import alfworld.gen.constants as C
import alfworld.gen.goal_library as goal_library

#: ALFWorld's six task types (its ``TASK_TYPES`` 1-6), in that order.
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: The appliance each state-changing task type needs, and its verb.
APPLIANCE = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "clean", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "heat", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "cool", "Coolable"),
}
LAMPS = ("DeskLamp", "FloorLamp")
#: Receptacle types a lamp may stand on (ALFRED's lamps stand on tables, desks and dressers).
LAMP_STANDS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand", "CounterTop")
STATIC_RECEPTACLES = frozenset(C.RECEPTACLES) - frozenset(C.MOVABLE_RECEPTACLES)
#: Object types (PDDL ``otype``), as ALFWorld's problems declare them.
OBJECT_TYPES = sorted(frozenset(C.OBJECTS_SET) - STATIC_RECEPTACLES)
#: Types that can be picked up: whatever some receptacle can hold (sliced variants excluded).
PICKUPABLE = frozenset(o for objs in C.VAL_RECEPTACLE_OBJECTS.values() for o in objs if not o.endswith("Sliced"))
LAYOUTS = Path(alfworld.gen.__file__).parent / "layouts"
#: Where the agent starts: the middle of the room, no receptacle there.
START = "loc|99|99|0|30"


def floor_plans() -> list[int]:
    """Every floor plan whose layout the wheel ships (1-30 kitchens, 201-230 living rooms,
    301-330 bedrooms, 401-430 bathrooms)."""
    return sorted(int(p.name[len("FloorPlan") : -len("-objects.json")]) for p in LAYOUTS.glob("FloorPlan*-objects.json"))


def room_type(plan: int) -> str:
    return next(name for name, plans in C.SCENE_TYPE.items() if plan in plans)


def mangle(name: str) -> str:
    """ALFRED's id → PDDL name, as ALFWorld writes its problems (``fix_pddl_str_chars``)."""
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        name = name.replace(a, b)
    return name


@dataclass(frozen=True)
class Receptacle:
    id: str  # ALFRED id, e.g. "Cabinet|+00.68|+00.50|-02.20" or "Sink|...|SinkBasin"
    type: str
    location: str  # "loc|x|z|rotation|horizon"

    @property
    def openable(self) -> bool:
        return self.type in C.OPENABLE_CLASS_SET


@dataclass(frozen=True)
class Thing:
    id: str
    type: str
    receptacle: str  # the id of the receptacle it is in


@dataclass
class Layout:
    """One floor plan: its static receptacles (with an interaction point each) and object types."""

    plan: int
    receptacles: list[Receptacle]
    object_types: list[str]

    def of_type(self, rtype: str) -> list[Receptacle]:
        return [r for r in self.receptacles if r.type == rtype]

    @property
    def receptacle_types(self) -> set[str]:
        return {r.type for r in self.receptacles}


def _point(values: list[float]) -> str:
    x, z, rotation, horizon = values
    return f"loc|{round(x / C.AGENT_STEP_SIZE)}|{round(z / C.AGENT_STEP_SIZE)}|{int(rotation) // 90}|{int(horizon)}"


@cache
def load_layout(plan: int) -> Layout:
    """The receptacles of ``-openable.json`` (ALFRED's precomputed interaction points), plus one
    receptacle at a point of its own for each receptacle type the plan's object list names but
    that file lacks (coffee machines, stove burners, toasters, garbage cans...)."""
    objects = json.loads((LAYOUTS / f"FloorPlan{plan}-objects.json").read_text())
    points = json.loads((LAYOUTS / f"FloorPlan{plan}-openable.json").read_text())
    receptacles = []
    for rid, values in sorted(points.items()):
        parts = rid.split("|")
        rtype = parts[4] if len(parts) > 4 else parts[0]
        if rtype in STATIC_RECEPTACLES:
            receptacles.append(Receptacle(rid, rtype, _point(values)))
    present = {r.type for r in receptacles}
    for i, rtype in enumerate(sorted(t for t in set(objects) & STATIC_RECEPTACLES if t not in present)):
        # A synthetic id and point: coordinates no ALFRED object uses (y = +09.00); basins keep
        # ALFRED's "Sink|...|SinkBasin" shape, which the Demangler names "sinkbasin".
        basin = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}.get(rtype)
        rid = f"{basin or rtype}|+{i:02d}.00|+09.00|+00.00" + (f"|{rtype}" if basin else "")
        receptacles.append(Receptacle(rid, rtype, f"loc|{40 + i}|40|0|30"))
    return Layout(plan, receptacles, sorted(objects))


@dataclass
class Game:
    """A generated game: the PDDL problem, the goal text, and the scene the reference plans from."""

    spec: dict[str, Any]
    problem: str
    goal: str
    receptacles: list[Receptacle]
    things: list[Thing] = field(default_factory=list)

    def receptacle(self, rid: str) -> Receptacle:
        return next(r for r in self.receptacles if r.id == rid)


def _can_hold(rtype: str, otype: str) -> bool:
    return otype in C.VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def choose_spec(task_type: str, plan: int, seed: int) -> dict[str, Any] | None:
    """A game spec of ``task_type`` on floor plan ``plan`` (deterministic in ``seed``), or ``None``
    when the plan cannot host that task type (no fitting objects, appliance or lamp)."""
    if room_type(plan) not in C.GOALS_VALID[task_type]:
        return None
    rng = random.Random(f"spec:{task_type}:{plan}:{seed}")
    layout = load_layout(plan)
    rtypes = layout.receptacle_types
    placeable = sorted(t for t in layout.object_types if t in PICKUPABLE and any(_can_hold(r, t) for r in rtypes))
    toggle = None
    if task_type == "look_at_obj_in_light":
        lamps = [t for t in LAMPS if t in layout.object_types] if rtypes & set(LAMP_STANDS) else []
        if not lamps:
            return None
        toggle = rng.choice(lamps)
        candidates = [(o, None) for o in placeable]
    else:
        appliance = APPLIANCE.get(task_type)
        if appliance is not None:
            if appliance[0] not in rtypes:
                return None
            placeable = [o for o in placeable if o in C.VAL_ACTION_OBJECTS[appliance[2]]]
        candidates = [
            (o, r)
            for o in placeable
            for r in sorted(rtypes)
            if _can_hold(r, o)
            and (appliance is None or r != appliance[0])
            # at least one other receptacle type to start from, so the goal is not met at once
            and any(_can_hold(s, o) for s in rtypes if s != r)
        ]
    if not candidates:
        return None
    obj, recep = rng.choice(candidates)
    templates = goal_library.gdict[task_type]["templates"]
    return {
        "task_type": task_type,
        "floor_plan": plan,
        "seed": seed,
        "object": obj,
        "receptacle": recep,
        "toggle": toggle,
        "goal": rng.choice(templates).format(
            obj=obj.lower(), recep=(recep or "").lower(), toggle=(toggle or "").lower(), mrecep=""
        ),
    }


def build_game(spec: dict[str, Any]) -> Game:
    """The game of ``spec`` (see :func:`choose_spec`): scene, PDDL problem and goal text."""
    task_type, plan = spec["task_type"], int(spec["floor_plan"])
    target, recep, toggle = spec["object"], spec.get("receptacle"), spec.get("toggle")
    rng = random.Random(f"scene:{task_type}:{plan}:{spec['seed']}")
    layout = load_layout(plan)
    receptacles = layout.receptacles
    things: list[Thing] = []
    used: set[str] = set()

    def new_id(otype: str) -> str:
        while True:
            x, y, z = rng.uniform(-4, 4), rng.uniform(0, 2), rng.uniform(-4, 4)
            oid = f"{otype}|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"
            if oid not in used:
                used.add(oid)
                return oid

    def place(otype: str, count: int, *, avoid: str | None = None) -> None:
        spots = [r for r in receptacles if _can_hold(r.type, otype) and r.type != avoid]
        for _ in range(count):
            where = rng.choice(spots)
            things.append(Thing(new_id(otype), otype, where.id))

    room = spec.get("room")
    if room is not None:
        # A small room (the easy splits): only the listed receptacles of the layout, and exactly
        # the listed objects, each in the receptacle given for it.
        keep = set(room["receptacles"])
        receptacles = [r for r in receptacles if r.id in keep]
        if len(receptacles) != len(keep):
            raise ValueError(f"floor plan {plan} has no receptacle {sorted(keep - {r.id for r in receptacles})}")
        things = [Thing(new_id(otype), otype, rid) for otype, rid in room["objects"]]
        problem = _problem_text(spec, receptacles, things, START)
        return Game(spec=spec, problem=problem, goal=spec["goal"], receptacles=receptacles, things=things)
    # The targets first: never already in the goal receptacle, so no game starts won.
    wanted = 2 + rng.randint(0, 1) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    place(target, wanted, avoid=recep)
    if toggle is not None:
        stand = rng.choice([r for r in receptacles if r.type in LAMP_STANDS])
        things.append(Thing(new_id(toggle), toggle, stand.id))
    # Then the rest of the room: every other pickable type of the plan, 1-3 instances.
    for otype in layout.object_types:
        if otype in (target, toggle) or otype not in PICKUPABLE:
            continue
        if any(_can_hold(r.type, otype) for r in receptacles):
            place(otype, rng.randint(1, C.MAX_NUM_OF_OBJ_INSTANCES), avoid=recep if otype == target else None)

    problem = _problem_text(spec, receptacles, things, START)
    return Game(spec=spec, problem=problem, goal=spec["goal"], receptacles=receptacles, things=things)


def _goal_pddl(spec: dict[str, Any]) -> str:
    pddl = goal_library.gdict[spec["task_type"]]["pddl"].format(
        obj=spec["object"], recep=spec.get("receptacle") or "", toggle=spec.get("toggle") or "", mrecep=""
    )
    # The library's text closes the (define ...) too and writes " # " for " - " (ALFWorld's own
    # fix_pddl_str_chars does the same replacement).
    return pddl.replace(" # ", " - ").strip()


def _problem_text(spec: dict[str, Any], receptacles: list[Receptacle], things: list[Thing], start: str) -> str:
    by_id = {r.id: r for r in receptacles}
    types_in_scene = {t.type for t in things}
    locations = sorted({r.location for r in receptacles} | {start})
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in OBJECT_TYPES]
    objects += [f"{t}Type - rtype" for t in sorted(STATIC_RECEPTACLES)]
    objects += [f"{mangle(t.id)} - object" for t in sorted(things, key=lambda t: t.id)]
    objects += [f"{mangle(r.id)} - receptacle" for r in receptacles]
    objects += [f"{mangle(loc)} - location" for loc in locations]

    init = [f"(atLocation agent1 {mangle(start)})"]
    for r in receptacles:
        init.append(f"(receptacleType {mangle(r.id)} {r.type}Type)")
        init.append(f"(receptacleAtLocation {mangle(r.id)} {mangle(r.location)})")
        if r.openable:
            init.append(f"(openable {mangle(r.id)})")
    for t in sorted(things, key=lambda t: t.id):
        name = mangle(t.id)
        init.append(f"(objectType {name} {t.type}Type)")
        init.append(f"(inReceptacle {name} {mangle(t.receptacle)})")
        init.append(f"(objectAtLocation {name} {mangle(by_id[t.receptacle].location)})")
        if t.type in PICKUPABLE:
            init.append(f"(pickupable {name})")
        if t.type in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {name})")
        for predicate, group in (
            ("cleanable", "Cleanable"),
            ("heatable", "Heatable"),
            ("coolable", "Coolable"),
            ("toggleable", "Toggleable"),
            ("sliceable", "Sliceable"),
        ):
            if t.type in C.VAL_ACTION_OBJECTS[group]:
                init.append(f"({predicate} {name})")
    for rtype in sorted({r.type for r in receptacles}):
        for otype in sorted(types_in_scene):
            if _can_hold(rtype, otype):
                init.append(f"(canContain {rtype}Type {otype}Type)")

    return (
        f"(define (problem plan_{spec['task_type']}_{spec['floor_plan']}_{spec['seed']})\n"
        "    (:domain alfred)\n"
        "    (:objects\n        " + "\n        ".join(objects) + "\n    )\n"
        "    (:init\n        " + "\n        ".join(init) + "\n    )\n"
        "    " + _goal_pddl(spec) + "\n"
    )
