"""Variables as programs, and programs as SPARQL.

As in AgentBench, a variable is not a materialised set but the *program* that derives it
(``get_neighbors(#0, r)`` builds ``(JOIN (R r) #0)``); only listing relations or attributes and
scoring the final answer run a query. A program is a small tree:

* :class:`Entity` ``m.0abc``; :class:`Join` ``(JOIN (R relation) child)``: everything that
  ``relation`` leads to from the child's entities; :class:`And` ``(AND a b)``; :class:`Count`;
  :class:`Arg` ``(ARGMAX child attribute)`` / ``ARGMIN``; :class:`Class` ``type`` (only in data
  S-expressions: the entities of a type).

:func:`select_query` compiles a program into one SPARQL 1.1 query that selects ``?x``. It keeps
AgentBench's two filters on the answer: no entity named in the program is its own answer, and
literals must be untagged or English. Where AgentBench's translator (GrailQA's ``lisp_to_sparql``)
handles a superlative only at the top and writes Virtuoso's ``SELECT COUNT DISTINCT``, this one
nests every operator (an ``ARGMAX`` inside a ``JOIN`` is a sub-select) and writes standard
``COUNT(DISTINCT ?x)``, so any SPARQL 1.1 store runs it.

:func:`parse_s_expression` reads a data file's ``s_expression`` (GrailQA's Lisp) into the same tree.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

NS = "http://rdf.freebase.com/ns/"
#: ``\Z``, not ``$``: ``$`` also matches before a final newline, which would end up inside an IRI.
_ID = re.compile(r"^[mg]\.[\w]+\Z")
_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)+\Z")


class ProgramError(ValueError):
    """An S-expression or identifier the compiler cannot read."""


@dataclass(frozen=True)
class Entity:
    mid: str

    def lisp(self) -> str:
        return self.mid


@dataclass(frozen=True)
class Class:
    type: str

    def lisp(self) -> str:
        return self.type


@dataclass(frozen=True)
class Join:
    """``(JOIN (R relation) child)``: the objects of ``relation`` from ``child``'s entities (what
    ``get_neighbors`` builds); ``forward``: ``(JOIN relation child)``, the subjects whose
    ``relation`` points at them (GrailQA writes both)."""

    relation: str
    child: Program
    forward: bool = False

    def lisp(self) -> str:
        rel = self.relation if self.forward else f"(R {self.relation})"
        return f"(JOIN {rel} {self.child.lisp()})"


@dataclass(frozen=True)
class And:
    left: Program
    right: Program

    def lisp(self) -> str:
        return f"(AND {self.left.lisp()} {self.right.lisp()})"


@dataclass(frozen=True)
class Count:
    child: Program

    def lisp(self) -> str:
        return f"(COUNT {self.child.lisp()})"


@dataclass(frozen=True)
class Arg:
    child: Program
    attribute: str
    maximum: bool

    def lisp(self) -> str:
        return f"({'ARGMAX' if self.maximum else 'ARGMIN'} {self.child.lisp()} {self.attribute})"


Program = Entity | Class | Join | And | Count | Arg


def _iri(name: str) -> str:
    """A Freebase name as a full IRI (no prefix declarations, nothing for a store to misparse)."""
    return f"<{NS}{name}>"


def _entity(mid: str) -> str:
    if not is_entity_id(mid):
        raise ProgramError(f"not an entity id: {mid!r}")
    return _iri(mid)


def is_entity_id(text: str) -> bool:
    """A Freebase id (``m.0abc``, ``g.11b6``; see :mod:`.arguments` on ``g.`` and AgentBench)."""
    return bool(_ID.match(text))


def check_name(name: str) -> str:
    """A relation or attribute name goes into a query as ``ns:NAME``: allow only ``a.b.c`` words."""
    if not _NAME.match(name):
        raise ProgramError(f"not a relation name: {name!r}")
    return name


def has_superlative(p: Program) -> bool:
    """Whether an ``ARGMAX``/``ARGMIN`` sits anywhere in the program."""
    if isinstance(p, Arg):
        return True
    if isinstance(p, Join | Count):
        return has_superlative(p.child)
    if isinstance(p, And):
        return has_superlative(p.left) or has_superlative(p.right)
    return False


def agentbench_cannot_score(p: Program) -> str | None:
    """Why AgentBench cannot score ``p`` as a final answer, or ``None`` when it can.

    A count of a program with a superlative in it (``(COUNT (ARGMAX …))``, also with joins between):
    AgentBench's translator (GrailQA's ``lisp_to_sparql``) then writes ``SELECT COUNT DISTINCT ?x
    WHERE {…}`` followed by the superlative's ``ORDER BY … LIMIT 1 } }``: two closing braces too
    many. Virtuoso rejects the query (``SP030: SPARQL compiler … Too many closing parentheses``),
    SPARQLWrapper raises, and AgentBench ends the sample as ``agent validation failed`` without a
    reward. The task does the same rather than score a count that AgentBench never could: a count of
    an argmax is nearly always 1, the gold answer of 16 of the 31 count questions of AgentBench's
    ``std.json`` (100 of 196 in ``kg_rl_all.json``), so scoring it would pay a shortcut.
    """
    if isinstance(p, Count) and has_superlative(p.child):
        return (
            "AgentBench cannot score a count of a variable made by argmax/argmin (its SPARQL for it is "
            "malformed and the endpoint rejects it), so the episode ends as agent validation failed"
        )
    return None


def entities_of(p: Program) -> list[str]:
    """The entity ids a program names, in order, without repeats."""
    out: dict[str, None] = {}

    def walk(q: Program) -> None:
        if isinstance(q, Entity):
            out[q.mid] = None
        elif isinstance(q, Join | Count):
            walk(q.child)
        elif isinstance(q, Arg):
            walk(q.child)
        elif isinstance(q, And):
            walk(q.left)
            walk(q.right)

    walk(p)
    return list(out)


class _Compiler:
    def __init__(self) -> None:
        self._n = itertools.count()

    def fresh(self) -> str:
        return f"?v{next(self._n)}"

    def patterns(self, p: Program, out: str) -> list[str]:
        """Graph patterns that bind ``out`` to the program's entities."""
        if isinstance(p, Entity):
            return [f"VALUES {out} {{ {_entity(p.mid)} }}"]
        if isinstance(p, Class):
            return [f"{out} {_iri('type.object.type')} {_iri(check_name(p.type))} ."]
        if isinstance(p, Join):
            rel = _iri(check_name(p.relation))
            if isinstance(p.child, Entity):
                src = _entity(p.child.mid)
                return [f"{out} {rel} {src} ." if p.forward else f"{src} {rel} {out} ."]
            src = self.fresh()
            return [*self.patterns(p.child, src), f"{out} {rel} {src} ." if p.forward else f"{src} {rel} {out} ."]
        if isinstance(p, And):
            return [*self.patterns(p.left, out), *self.patterns(p.right, out)]
        if isinstance(p, Arg):
            attr = check_name(p.attribute)
            value, inner, inner_value = self.fresh(), self.fresh(), self.fresh()
            best = "MAX" if p.maximum else "MIN"
            body = " ".join([*self.patterns(p.child, inner), f"{inner} {_iri(attr)} {inner_value} ."])
            return [
                *self.patterns(p.child, out),
                f"{out} {_iri(attr)} {value} .",
                f"{{ SELECT ({best}({inner_value}) AS {value}) WHERE {{ {body} }} }}",
            ]
        if isinstance(p, Count):
            raise ProgramError("a count is a number, not a set of entities")
        raise ProgramError(f"not a program: {p!r}")


_PREFIX = ""  # full IRIs everywhere (see _iri)
#: AgentBench writes ``OR`` (Virtuoso accepts it); SPARQL 1.1 says ``||``.
_LANG = "FILTER (!isLiteral(?x) || lang(?x) = '' || langMatches(lang(?x), 'en'))"


def _where(p: Program) -> str:
    lines = _Compiler().patterns(p, "?x")
    lines.append(_LANG)
    lines += [f"FILTER (?x != {_entity(mid)})" for mid in entities_of(p)]
    return "\n".join(lines)


def select_query(p: Program) -> str:
    """The query whose ``?x`` (or, for a count, ``?count``) is the program's answer."""
    if isinstance(p, Count):
        return f"{_PREFIX}SELECT (COUNT(DISTINCT ?x) AS ?count) WHERE {{\n{_where(p.child)}\n}}"
    return f"{_PREFIX}SELECT DISTINCT ?x WHERE {{\n{_where(p)}\n}}"


def predicates_query(p: Program) -> str:
    """The distinct predicates leaving the program's entities (AgentBench's get_relations/get_attributes)."""
    if isinstance(p, Entity):
        return f"{_PREFIX}SELECT DISTINCT ?rel WHERE {{ {_entity(p.mid)} ?rel ?obj . }}"
    return f"{_PREFIX}SELECT DISTINCT ?rel WHERE {{\n{{ SELECT DISTINCT ?x WHERE {{\n{_where(p)}\n}} }}\n?x ?rel ?obj .\n}}"


# ---------------------------------------------------------------------------- S-expressions

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_s_expression(text: str) -> Program:
    """GrailQA's Lisp (``(AND t (JOIN (R r) m.0x))``, ``(COUNT …)``, ``(ARGMAX … attr)``)."""
    tokens = _TOKEN.findall(text)
    pos = 0

    def read():
        nonlocal pos
        if pos >= len(tokens):
            raise ProgramError(f"unexpected end of S-expression: {text!r}")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            items = []
            while pos < len(tokens) and tokens[pos] != ")":
                items.append(read())
            if pos >= len(tokens):
                raise ProgramError(f"unbalanced parentheses: {text!r}")
            pos += 1
            return items
        if tok == ")":
            raise ProgramError(f"unbalanced parentheses: {text!r}")
        return tok

    tree = read()
    if pos != len(tokens):
        raise ProgramError(f"trailing tokens in S-expression: {text!r}")
    return _build(tree)


def _build(node) -> Program:
    if isinstance(node, str):
        return Entity(node) if is_entity_id(node) else Class(node)
    if not node:
        raise ProgramError("empty expression")
    op, *args = node
    if op == "JOIN" and len(args) == 2:
        rel, child = args
        if isinstance(rel, list) and len(rel) == 2 and rel[0] == "R" and isinstance(rel[1], str):
            return Join(rel[1], _build(child))
        if isinstance(rel, str):
            return Join(rel, _build(child), forward=True)
        raise ProgramError(f"JOIN expects a relation or (R relation), got {rel!r}")
    if op == "AND" and len(args) == 2:
        return And(_build(args[0]), _build(args[1]))
    if op == "COUNT" and len(args) == 1:
        return Count(_build(args[0]))
    if op in ("ARGMAX", "ARGMIN") and len(args) == 2 and isinstance(args[1], str):
        return Arg(_build(args[0]), args[1], op == "ARGMAX")
    raise ProgramError(f"unsupported S-expression operator {op!r} with {len(args)} argument(s)")
