"""The ontology the KG tools consult: which relations exist, their range types, which are numeric.

AgentBench reads three files of its ``ontology/`` directory: ``fb_roles`` (one relation per line:
``DOMAIN_TYPE RELATION RANGE_TYPE``), ``vocab.json`` (``{"relations": [...], "attributes":
[...], "classes": [...]}``: what ``get_relations`` and ``get_attributes`` may show) and
``reverse_properties`` (``RELATION<TAB>REVERSE``). :func:`load_ontology` reads that directory, so
AgentBench's own files work for a real Freebase; :data:`GENERATED` is the ontology of the graph
that :mod:`agentrl_env_kg.generate` builds, written in the same three files by its ``--out``.

``fb_roles`` is read as AgentBench reads it (``utils/logic_form_util.py``: ``fields[1]`` is the
relation, ``fields[2]`` its range): the first three words of a line count, further words are
ignored. AgentBench's own file has such a line (line 5608 of 19,281: two roles glued together where
a newline went missing, ``... bicycle_wheel.holes type.intbase.litcentral... financing_government_agency
government.government_agency``); neither of its relations is in ``vocab.json``, so no tool shows them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from agentrl_envs.errors import DataError


@dataclass(frozen=True)
class Relation:
    name: str
    domain: str
    range: str
    reverse: str | None = None


@dataclass(frozen=True)
class Ontology:
    """``range_of[relation]`` is the type of the entities a relation leads to (AgentBench's
    ``range_info``); ``relations`` and ``attributes`` are what the tools may list."""

    range_of: dict[str, str]
    relations: frozenset[str]
    attributes: frozenset[str]
    reverse: dict[str, str] = field(default_factory=dict)

    def write(self, directory: str | Path, domain_of: dict[str, str]) -> None:
        """Write AgentBench's three files (``domain_of``: each relation's domain type)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        roles = "".join(f"{domain_of[r]} {r} {self.range_of[r]}\n" for r in sorted(self.range_of))
        (d / "fb_roles").write_text(roles)
        vocab = {"relations": sorted(self.relations), "attributes": sorted(self.attributes)}
        (d / "vocab.json").write_text(json.dumps(vocab, indent=1) + "\n")
        (d / "reverse_properties").write_text("".join(f"{r}\t{v}\n" for r, v in sorted(self.reverse.items())))


def load_ontology(directory: str | Path) -> Ontology:
    """Read AgentBench's ``fb_roles``, ``vocab.json`` and (optional) ``reverse_properties``."""
    d = Path(directory)
    try:
        roles = (d / "fb_roles").read_text().splitlines()
        vocab = json.loads((d / "vocab.json").read_text())
    except FileNotFoundError as e:
        raise DataError(f"ontology directory {d}: missing {Path(e.filename).name} (needs fb_roles and vocab.json)") from None
    except json.JSONDecodeError as e:
        raise DataError(f"ontology directory {d}: vocab.json is not JSON ({e})") from None
    range_of: dict[str, str] = {}
    for n, line in enumerate(roles, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 3:
            raise DataError(f"{d / 'fb_roles'} line {n}: expected 'DOMAIN RELATION RANGE', got {line!r}")
        # AgentBench's reading: the first three words; a later line for the same relation wins.
        range_of[parts[1]] = parts[2]
    reverse: dict[str, str] = {}
    rp = d / "reverse_properties"
    if rp.exists():
        for line in rp.read_text().splitlines():
            if "\t" in line:
                a, b = line.split("\t", 1)
                reverse[a] = b.strip()
    if not isinstance(vocab, dict) or not {"relations", "attributes"} <= vocab.keys():
        raise DataError(f"{d / 'vocab.json'}: expected an object with 'relations' and 'attributes'")
    # AgentBench: the relations a tool may show are the vocab's; fb_roles gives their ranges.
    return Ontology(range_of, frozenset(vocab["relations"]), frozenset(vocab["attributes"]), reverse)
