"""How a tool argument names a variable or an entity: AgentBench-FC's reading, and where it differs.

AgentBench-FC (``src/server/tasks/knowledgegraph/task.py``) converts every argument before it calls
a tool: a value that *starts with* ``#`` is ``variables_list[int(value[1:])]``; a value equal to an
entity name of the question is that entity's id; anything else is passed on as written, and only
``get_relations``/``get_neighbors`` take a string, when it matches ``^([mf])\\.[\\w_]+$``. So:

* ``#0``, ``#0 `` and ``# 0`` name variable 0 (``int()`` allows whitespace around the digits), and
  so do they here.
* `` #0`` (whitespace *before* the ``#``) is no variable: AgentBench passes the string on and the
  tool fails (``variable must be a variable or an entity``, or ``'str' object has no attribute
  'type'`` in ``intersection``). Here too it is an error, with a message that says why.
* An entity name must be one of the question's exactly (no stripping), as in AgentBench.
* ``#-1`` is AgentBench's last variable (Python's negative index); here it is an error
  (deliberate: an accident of ``list[int]``, not a notation any prompt teaches).
* Freebase ids: ``m.…`` as in AgentBench; ``g.…`` too (deliberate: AgentBench's regex rejects them,
  yet its own data names entities by ``g.`` ids — 3 of the 150 questions of ``std.json`` and 14 of
  the 1,214 of ``kg_rl_all.json``, whose gold actions all call a tool on the ``g.`` id — and its
  SPARQL translator handles them); ``f.…`` not (AgentBench's regex lets them through, but its
  translator writes any id that starts with neither ``m.`` nor ``g.`` as a bare token, a malformed
  query; no entity or answer of AgentBench's three data files has an ``f.`` id).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agentrl_envs.errors import ToolCallError

from .program import Entity, is_entity_id

#: ``#`` first, then what Python's ``int()`` reads as a non-negative number (ASCII digits).
_VARIABLE = re.compile(r"#\s*(\d+)\s*", re.ASCII)


def read_argument(tool: str, value: str, entities: Mapping[str, str], n_variables: int, *, entity_ok: bool) -> int | Entity:
    """The variable index (``#k``) or the entity (a name of the question, or an id) ``value`` names.

    ``entity_ok``: whether the tool takes an entity (``get_relations``, ``get_neighbors``).
    Raises :class:`ToolCallError` with AgentBench's rule and what is wrong.
    """
    if value.startswith("#"):
        m = _VARIABLE.fullmatch(value)
        if m is None:
            raise ToolCallError(f"{tool}: variable must be a variable (#k), got {value!r}", tool=tool)
        k = int(m.group(1))
        if k >= n_variables:
            have = f"#0 to #{n_variables - 1}" if n_variables else "none yet"
            raise ToolCallError(f"{tool}: there is no variable #{k} (variables so far: {have})", tool=tool)
        return k
    hint = ""
    if value != value.lstrip():
        hint = f" (nothing may come before {value.lstrip()!r}: remove the leading whitespace)"
    elif value != value.rstrip():
        hint = " (remove the trailing whitespace)"
    if not entity_ok:
        raise ToolCallError(f"{tool}: variable must be a variable (#k), got {value!r}{hint}", tool=tool)
    if value in entities:
        return Entity(entities[value])
    if is_entity_id(value):
        return Entity(value)
    names = ", ".join(entities) or "none"
    raise ToolCallError(
        f"{tool}: variable must be a variable or an entity; {value!r} is neither{hint} "
        f"(use #k for a variable, or an entity of the question: {names})",
        tool=tool,
    )
