"""ALFWorld's text engine (TextWorld's ``PddlEnv`` behind ALFWorld's ``AlfredDemangler``), made
fast enough to serve and safe to run for days.

Measured on this project's 2-core machine with a generated kitchen game:

* ``PddlEnv.load`` and ``reset`` each build a ``PddlState``, which runs Fast Downward's
  ``pddl2sas`` translation twice (≈0.8 s each); the grammar (``GameLogic``) is parsed again on
  every load (≈0.4 s); and every observation derives each admissible command through TatSu parses
  of the same few templates and conditions. :func:`install_caches` memoizes the four pure
  functions behind this (translation, grammar, template and condition parses; bounded LRUs), so a
  game loads, resets and steps in tens of milliseconds with byte-identical text.
* A ``PddlEnv`` loads its own copy of ``libdownward.so`` (its state is global to the library);
  creating one per game leaks ≈6 MB each. :class:`GameSlot` keeps one ``PddlEnv`` for ever and
  loads game after game into it.
* ``fast_downward.pddl2sas`` overwrites ``sys.argv``: the cached wrapper puts it back.

This module runs inside the engine processes of :mod:`.pool` (or in-process with
``processes=0``); nothing here is asyncio.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import alfworld

LOGIC_DIR = Path(alfworld.__file__).parent / "data"


class LRU:
    """A small bounded memo: ``get(key, make)`` returns the cached value or stores ``make()``."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        try:
            value = self._data[key]
        except KeyError:
            self.misses += 1
            value = self._data[key] = make()
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)
            return value
        self.hits += 1
        self._data.move_to_end(key)
        return value

    def __len__(self) -> int:
        return len(self._data)


_installed: dict[str, LRU] = {}


def _clone_symbols(node: Any) -> Any:
    """A fresh copy of a parsed TextWorld grammar expression (what a new parse would return):
    the derivation writes ``context`` into its symbols, so a cached parse is never handed out."""
    if isinstance(node, list):
        return [_clone_symbols(n) for n in node]
    if not hasattr(node, "__dict__"):
        return node  # str
    copy = object.__new__(type(node))
    copy.__dict__ = {k: _clone_symbols(v) if k in ("symbol", "expression") else v for k, v in node.__dict__.items()}
    copy.__dict__["context"] = {}
    return copy


def install_caches(translations: int = 64, grammars: int = 64) -> dict[str, LRU]:
    """Memoize the engine's pure, slow functions in this process (idempotent); returns the caches.

    ``translations`` and ``grammars`` bound how many games' translations and grammars are kept:
    memory stays flat however many games a process plays."""
    if _installed:
        return _installed
    import fast_downward
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    translate, parse_logic, parse_text = fast_downward.pddl2sas, pddl_logic.GameLogic, textgen._parse_and_convert
    parse_query = Rule.parse_conjunctive_query
    caches = {
        "translation": LRU(translations),
        "grammar": LRU(grammars),
        "template": LRU(4096),
        "query": LRU(4096),
    }

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        def run() -> Any:
            argv = sys.argv[:]
            try:
                return translate(domain, problem, verbose=verbose, optimize=optimize)
            finally:
                sys.argv[:] = argv

        return caches["translation"].get((domain, problem, bool(optimize)), run)

    def game_logic(domain: str, grammar: str) -> Any:
        return caches["grammar"].get((domain, grammar), lambda: parse_logic(domain=domain, grammar=grammar))

    def parse_and_convert(text: str, **kwargs: Any) -> Any:
        key = (text, tuple(sorted(kwargs.items())))
        return _clone_symbols(caches["template"].get(key, lambda: parse_text(text, **kwargs)))

    def conjunctive_query(expr: str) -> Any:
        return caches["query"].get(expr, lambda: parse_query(expr))  # read-only once parsed

    def copy_context(context: dict[str, Any]) -> dict[str, Any]:
        # TextWorld deep-copies the variables (EntityInfo objects) and the mapping for every
        # symbol it derives; nothing mutates them in place, so fresh dicts are the same.
        return {**context, "variables": dict(context["variables"]), "mapping": dict(context["mapping"])}

    def symbol_copy(self: Any, context: dict[str, Any]) -> Any:
        # TextWorld's Symbol.copy deep-copies the symbol *with its old context* (the whole game
        # state) and then replaces that context; copy the symbol tree alone.
        copy = _clone_symbols(self)
        copy.context = copy_context(context)
        return copy

    fast_downward.pddl2sas = pddl2sas
    textgen.copy_context = copy_context
    textgen.Symbol.copy = symbol_copy  # type: ignore[method-assign]
    pddl_logic.GameLogic = game_logic
    textgen._parse_and_convert = parse_and_convert
    Rule.parse_conjunctive_query = staticmethod(conjunctive_query)  # type: ignore[method-assign]
    _installed.update(caches)
    return _installed


_HELP_ACTION = "\n(:action help\n"


@functools.cache
def logic_files(variant: str) -> tuple[str, str]:
    """``(pddl_domain, grammar)`` of a logic variant; the grammar still says ``UNKNOWN GOAL``.

    ``agentbench``: ALFWorld 2.1.1's logic, which the games of AgentBench's data carry
    (``You arrive at loc 12.``, ``put X in/on Y``, no ``help``): the wheel's 2.1.2 files with
    ALFWorld's own 2.1.1 → 2.1.2 patch (``scripts/patch_tw-pddl.py``) undone.
    ``alfworld``: the wheel's files as they are (2.1.2: ``move X to Y``, ``help``)."""
    domain = (LOGIC_DIR / "alfred.pddl").read_text()
    grammar = (LOGIC_DIR / "alfred.twl2").read_text()
    if variant == "alfworld":
        return domain, grammar
    if variant != "agentbench":
        raise ValueError(f"unknown logic {variant!r}: expected 'agentbench' or 'alfworld'")
    head, _, tail = domain.partition(_HELP_ACTION)
    domain = head + tail[tail.index("\n)\n") + 3 :] if tail else domain
    head, sep, _ = grammar.partition("\naction help {")
    grammar = head if sep else grammar
    for new, old in (
        ("You arrive at {r.name}.", "You arrive at {lend.name}."),
        ('template :: "move {o} to {r}";', 'template :: "put {o} in/on {r}";'),
        ("You move the {o.name} to the {r.name}.", "You put the {o.name} in/on the {r.name}."),
    ):
        grammar = grammar.replace(new, old)
    return domain, grammar


def game_data(problem: str, goal: str, logic: str = "agentbench") -> dict[str, str]:
    """A ``.tw-pddl`` game (the JSON ALFWorld's generator writes) for a generated problem."""
    domain, grammar = logic_files(logic)
    return {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", goal), "pddl_problem": problem}


@dataclass
class Observation:
    """What the engine says after a reset or a step."""

    text: str
    commands: list[str]  # the admissible commands, sorted (the engine's order)
    won: bool


class GameSlot:
    """One ``PddlEnv`` (one ``libdownward`` copy), kept for the life of its process and reused
    for game after game; it plays one game at a time."""

    def __init__(self) -> None:
        install_caches()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs import PddlEnv
        from textworld.envs.pddl import logic as pddl_logic

        class FreshStatePddlEnv(PddlEnv):
            """``load`` builds the game's initial ``PddlState`` and ``reset`` right after builds
            the same one again (≈40 ms in a kitchen): the first reset after a load takes the one
            that load built, which nothing has touched yet."""

            _fresh: Any = None

            def load(self, filename_or_data: Any) -> None:
                super().load(filename_or_data)
                self._fresh = self._pddl_state

            def reset(self) -> Any:
                fresh, self._fresh = self._fresh, None
                if fresh is None:
                    return super().reset()
                build = pddl_logic.PddlState
                pddl_logic.PddlState = lambda *args, **kwargs: fresh  # this process runs one call at a time
                try:
                    return super().reset()
                finally:
                    pddl_logic.PddlState = build

        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        self.env = AlfredDemangler(FreshStatePddlEnv(infos), shuffle=False)

    def start(self, game: dict[str, Any]) -> Observation:
        """Load ``game`` (a ``.tw-pddl`` dict) and reset it."""
        self.env.load(game)
        return self._observation(self.env.reset())

    def step(self, command: str) -> Observation:
        state, _, _ = self.env.step(command)
        return self._observation(state)

    @staticmethod
    def _observation(state: Any) -> Observation:
        return Observation(str(state.feedback), list(state["admissible_commands"]), bool(state["won"]))
