"""A deterministic generator of a Freebase-shaped graph and GrailQA-style questions over it.

Freebase itself cannot be downloaded here, so the KG task ships this generator. By seed it builds:

* a graph in Freebase's shape: mid-style ids (``m.0k3x9q``), ``domain.type.property`` relations
  stored in both directions where Freebase has a reverse property, ``type.object.name`` names
  (``@en``), ``type.object.type`` types (with supertypes: a city is a ``location.citytown`` and a
  ``location.location``), CVT nodes (``film.performance``, ``sports.sports_team_roster``,
  ``education.education``) and numeric attributes (``xsd:float`` / ``xsd:integer``);
* questions in AgentBench's format (``question``, ``qid``, ``source``, ``entities``,
  ``s_expression``, ``actions``, ``answer``) covering one-, two- and three-hop paths,
  intersections, counts and argmax/argmin, split into ``dev``, ``train`` and ``test`` with no
  question shared.

``--scale`` multiplies the number of entities (1: about 8,000 entities and 60,000 triples;
``--triples 1000000`` picks the scale that reaches a million). Same arguments, same bytes.

    python -m agentrl_env_kg.generate --out DIR [--seed 0] [--scale 1 | --triples N]

writes ``DIR/graph.nt``, ``DIR/ontology/`` (AgentBench's ``fb_roles``, ``vocab.json``,
``reverse_properties``) and ``DIR/{dev,train,test}.json``. The task's shipped splits are this
generator's output for the defaults (a test regenerates and compares them byte for byte).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ontology import Ontology, Relation

NS = "http://rdf.freebase.com/ns/"
XSD = "http://www.w3.org/2001/XMLSchema#"
DEFAULT_SEED = 0
#: Questions per kind in each split (six kinds: one_hop, two_hop, three_hop, intersection,
#: count, superlative).
SPLIT_SIZES = {"dev": 6, "test": 25, "train": 100}
KINDS = ("one_hop", "two_hop", "three_hop", "intersection", "count", "superlative")

# ---------------------------------------------------------------------------- the schema

#: (relation, domain type, range type, reverse relation or None). Every relation with a reverse
#: is stored in both directions, as Freebase stores its reverse properties.
_RELATIONS: list[tuple[str, str, str, str | None]] = [
    ("location.location.containedby", "location.location", "location.location", "location.location.contains"),
    ("people.person.place_of_birth", "people.person", "location.location", "location.location.people_born_here"),
    ("people.person.nationality", "people.person", "location.country", "location.country.nationals"),
    ("people.person.profession", "people.person", "people.profession", "people.profession.people_with_this_profession"),
    ("film.film.directed_by", "film.film", "film.director", "film.director.film"),
    ("film.film.starring", "film.film", "film.performance", "film.performance.film"),
    ("film.actor.film", "film.actor", "film.performance", "film.performance.actor"),
    ("film.performance.character", "film.performance", "film.film_character", "film.film_character.portrayed_in_films"),
    ("film.film.genre", "film.film", "film.film_genre", "film.film_genre.films_in_this_genre"),
    ("film.film.country", "film.film", "location.country", None),
    ("music.artist.album", "music.artist", "music.album", "music.album.artist"),
    ("music.album.genre", "music.album", "music.genre", "music.genre.albums"),
    ("music.artist.label", "music.artist", "music.record_label", "music.record_label.artist"),
    ("book.author.works_written", "book.author", "book.written_work", "book.written_work.author"),
    ("book.written_work.subjects", "book.written_work", "book.book_subject", "book.book_subject.works"),
    ("sports.sports_team.roster", "sports.sports_team", "sports.sports_team_roster", "sports.sports_team_roster.team"),
    ("sports.pro_athlete.teams", "sports.pro_athlete", "sports.sports_team_roster", "sports.sports_team_roster.player"),
    (
        "sports.sports_team_roster.position",
        "sports.sports_team_roster",
        "sports.sports_position",
        "sports.sports_position.players",
    ),
    ("sports.sports_team.sport", "sports.sports_team", "sports.sport", "sports.sport.teams"),
    ("sports.sports_team.location", "sports.sports_team", "location.location", "location.location.teams"),
    ("people.person.education", "people.person", "education.education", "education.education.student"),
    (
        "education.education.institution",
        "education.education",
        "education.university",
        "education.educational_institution.students_graduates",
    ),
    (
        "education.education.major_field_of_study",
        "education.education",
        "education.field_of_study",
        "education.field_of_study.students_majoring",
    ),
    (
        "organization.organization.founders",
        "organization.organization",
        "organization.organization_founder",
        "organization.organization_founder.organizations_founded",
    ),
    (
        "organization.organization.place_founded",
        "organization.organization",
        "location.location",
        "location.location.organizations_founded_here",
    ),
]
#: Numeric attributes: (relation, domain type, xsd datatype).
_ATTRIBUTES: list[tuple[str, str, str]] = [
    ("location.location.area", "location.location", "float"),
    ("topic_server.population_number", "location.location", "integer"),
    ("people.person.height_meters", "people.person", "float"),
    ("film.film.running_time", "film.film", "float"),
    ("music.album.length", "music.album", "float"),
    ("book.written_work.number_of_pages", "book.written_work", "integer"),
    ("sports.sports_team.founded", "sports.sports_team", "integer"),
    ("organization.organization.number_of_employees", "organization.organization", "integer"),
    ("education.university.total_enrollment", "education.university", "integer"),
]


def _schema() -> tuple[list[Relation], dict[str, str]]:
    """Every relation (a reverse leads from the forward's range back to its domain) and domains."""
    rels: list[Relation] = []
    for name, dom, rng, rev in _RELATIONS:
        rels.append(Relation(name, dom, rng, rev))
        if rev:
            rels.append(Relation(rev, rng, dom, name))
    domains = {r.name: r.domain for r in rels}
    for name, dom, _ in _ATTRIBUTES:
        domains[name] = dom
    return rels, domains


RELATIONS, _DOMAINS = _schema()
#: The ontology of every generated graph (it does not depend on the seed).
GENERATED = Ontology(
    range_of={**{r.name: r.range for r in RELATIONS}, **{a: f"type.{t}" for a, _, t in _ATTRIBUTES}},
    relations=frozenset(r.name for r in RELATIONS),
    attributes=frozenset(a for a, _, _ in _ATTRIBUTES),
    reverse={r.name: r.reverse for r in RELATIONS if r.reverse},
)
_REVERSE = GENERATED.reverse

# ---------------------------------------------------------------------------- names

_SYL = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ten",
    "vo",
    "shi",
    "an",
    "bel",
    "cor",
    "da",
    "el",
    "fin",
    "gor",
    "hal",
    "is",
    "jo",
    "kel",
    "lin",
    "mar",
    "nor",
    "or",
    "pel",
    "quin",
    "ros",
    "sa",
    "tor",
    "ul",
    "ven",
    "wil",
    "yar",
    "zen",
]
_ADJ = [
    "Silent",
    "Golden",
    "Hidden",
    "Broken",
    "Crimson",
    "Distant",
    "Electric",
    "Frozen",
    "Gentle",
    "Hollow",
    "Iron",
    "Jade",
    "Last",
    "Midnight",
    "Northern",
    "Open",
    "Painted",
    "Quiet",
    "Restless",
    "Scarlet",
    "Tender",
    "Upper",
    "Velvet",
    "Wild",
    "Young",
    "Bright",
    "Lonely",
    "Secret",
    "Burning",
    "Endless",
]
_NOUN = [
    "River",
    "Garden",
    "Harbor",
    "Mirror",
    "Signal",
    "Orchard",
    "Lantern",
    "Summit",
    "Voyage",
    "Kingdom",
    "Meadow",
    "Engine",
    "Shadow",
    "Letter",
    "Canyon",
    "Island",
    "Promise",
    "Machine",
    "Season",
    "Tower",
    "Bridge",
    "Compass",
    "Horizon",
    "Echo",
    "Forest",
    "Station",
    "Crown",
    "Harvest",
    "Journey",
    "Window",
]
_PROFESSIONS = [
    "Actor",
    "Writer",
    "Engineer",
    "Physician",
    "Lawyer",
    "Painter",
    "Musician",
    "Architect",
    "Journalist",
    "Teacher",
    "Chemist",
    "Economist",
    "Photographer",
    "Diplomat",
    "Farmer",
    "Pilot",
    "Historian",
    "Sculptor",
    "Producer",
    "Athlete",
]
_FILM_GENRES = [
    "Drama",
    "Comedy",
    "Thriller",
    "Western",
    "Documentary",
    "Science Fiction",
    "Horror",
    "Romance",
    "Animation",
    "Musical",
    "Crime",
    "Adventure",
    "Fantasy",
    "War",
    "Biography",
]
_MUSIC_GENRES = ["Jazz", "Rock", "Folk", "Blues", "Hip hop", "Soul", "Punk", "Reggae", "Ambient", "Opera", "Country", "Techno"]
_SUBJECTS = [
    "Astronomy",
    "Gardening",
    "Ancient Rome",
    "Sailing",
    "Chess",
    "Cooking",
    "Mathematics",
    "Birds",
    "Architecture",
    "Mountaineering",
    "Philosophy",
    "Medicine",
    "Railways",
    "Painting",
    "Economics",
    "Poetry",
    "Oceanography",
    "Botany",
    "Cinema",
    "Music theory",
    "Volcanoes",
    "Genetics",
    "Law",
    "Linguistics",
    "Aviation",
]
_SPORTS = [
    "Basketball",
    "Football",
    "Ice hockey",
    "Baseball",
    "Rugby",
    "Volleyball",
    "Handball",
    "Cricket",
    "Water polo",
    "Lacrosse",
    "Field hockey",
    "Netball",
]
_POSITIONS = [
    "Guard",
    "Forward",
    "Center",
    "Goalkeeper",
    "Defender",
    "Midfielder",
    "Pitcher",
    "Catcher",
    "Winger",
    "Striker",
    "Libero",
    "Setter",
]
_FIELDS = [
    "Physics",
    "History",
    "Biology",
    "Computer science",
    "Literature",
    "Economics",
    "Chemistry",
    "Philosophy",
    "Mathematics",
    "Sociology",
    "Psychology",
    "Law",
    "Medicine",
    "Geology",
    "Music",
    "Architecture",
    "Linguistics",
    "Anthropology",
    "Statistics",
    "Political science",
    "Astronomy",
    "Art history",
    "Engineering",
    "Education",
    "Nursing",
    "Agriculture",
    "Journalism",
    "Theology",
    "Ecology",
    "Finance",
]
_MID_CHARS = "0123456789bcdfghjklmnpqrstvwxyz_"


@dataclass
class Graph:
    """The generated graph in memory: names, types, edges (both directions) and attributes."""

    names: dict[str, str] = field(default_factory=dict)
    types: dict[str, list[str]] = field(default_factory=dict)
    edges: dict[str, dict[str, list[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    attrs: dict[str, dict[str, float | int]] = field(default_factory=lambda: defaultdict(dict))
    by_type: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    triples: int = 0

    def out(self, mid: str, rel: str) -> list[str]:
        e = self.edges.get(mid)
        return e.get(rel, []) if e is not None else []

    def follow(self, mids: set[str], rel: str) -> set[str]:
        return {y for x in mids for y in self.out(x, rel)}


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.g = Graph()
        self._mids: set[str] = set()
        self._order: list[str] = []  # entities in creation order (the N-Triples order)
        self._names_used: set[str] = set()

    def mid(self) -> str:
        while True:
            m = "m.0" + "".join(self.rng.choice(_MID_CHARS) for _ in range(self.rng.choice((4, 5, 6))))
            if m not in self._mids:
                self._mids.add(m)
                return m

    def entity(self, name: str | None, *types: str) -> str:
        m = self.mid()
        self._order.append(m)
        if name is not None:
            self.g.names[m] = name
        self.g.types[m] = list(types)
        for t in types:
            self.g.by_type[t].append(m)
        return m

    def unique(self, make) -> str:
        for _ in range(20):
            name = make()
            if name not in self._names_used:
                self._names_used.add(name)
                return name
        n = 2
        base = make()
        while f"{base} {n}" in self._names_used:
            n += 1
        self._names_used.add(f"{base} {n}")
        return f"{base} {n}"

    def word(self, syllables: int) -> str:
        return "".join(self.rng.choice(_SYL) for _ in range(syllables)).capitalize()

    def person_name(self) -> str:
        return self.unique(lambda: f"{self.word(self.rng.choice((2, 3)))} {self.word(self.rng.choice((2, 3)))}")

    def title(self) -> str:
        r = self.rng
        forms = (
            lambda: f"The {r.choice(_ADJ)} {r.choice(_NOUN)}",
            lambda: f"{r.choice(_NOUN)} of the {r.choice(_ADJ)} {r.choice(_NOUN)}",
            lambda: f"{r.choice(_ADJ)} {r.choice(_NOUN)}s",
            lambda: f"{self.word(2)} {r.choice(_NOUN)}",
        )
        return self.unique(lambda: r.choice(forms)())

    def link(self, a: str, rel: str, b: str) -> None:
        self.g.edges[a][rel].append(b)
        rev = _REVERSE.get(rel)
        if rev:
            self.g.edges[b][rev].append(a)

    def attr(self, m: str, rel: str, value: float | int) -> None:
        self.g.attrs[m][rel] = value


def build_graph(seed: int = DEFAULT_SEED, scale: float = 1.0) -> tuple[Graph, list[str]]:
    """The graph of ``seed`` and ``scale`` and its entities in creation order."""
    b = _Builder(seed)
    r = b.rng

    def n(base: int) -> int:
        return max(1, round(base * scale))

    countries = [
        b.entity(
            b.unique(lambda: b.word(r.choice((2, 3))) + r.choice(("ia", "land", "stan", "ora"))),
            "location.country",
            "location.location",
        )
        for _ in range(min(n(30), 400))
    ]
    cities = []
    for _ in range(n(300)):
        c = b.entity(
            b.unique(lambda: b.word(r.choice((2, 3))) + r.choice(("", " City", "ville", "burg", " Falls"))),
            "location.citytown",
            "location.location",
        )
        b.link(c, "location.location.containedby", r.choice(countries))
        cities.append(c)
    for loc in countries + cities:
        big = loc in set(countries)
        b.attr(loc, "location.location.area", round(r.uniform(500, 900000) if big else r.uniform(5, 3000), 2))
        b.attr(loc, "topic_server.population_number", r.randint(500000, 90000000) if big else r.randint(2000, 4000000))
    professions = [b.entity(p, "people.profession") for p in _PROFESSIONS]
    film_genres = [b.entity(x, "film.film_genre") for x in _FILM_GENRES]
    music_genres = [b.entity(x, "music.genre") for x in _MUSIC_GENRES]
    subjects = [b.entity(x, "book.book_subject") for x in _SUBJECTS]
    sports = [b.entity(x, "sports.sport") for x in _SPORTS]
    positions = [b.entity(x, "sports.sports_position") for x in _POSITIONS]
    fields_ = [b.entity(x, "education.field_of_study") for x in _FIELDS]
    labels = [b.entity(b.unique(lambda: f"{b.word(2)} Records"), "music.record_label") for _ in range(min(n(20), 300))]

    roles = {
        "film.actor": n(200),
        "film.director": n(60),
        "book.author": n(150),
        "sports.pro_athlete": n(250),
        "organization.organization_founder": n(60),
    }
    people: list[str] = []
    by_role: dict[str, list[str]] = defaultdict(list)
    for role, count in roles.items():
        for _ in range(count):
            extra = (role,) if r.random() > 0.15 or not by_role[role] else (role, r.choice(list(roles)))
            p = b.entity(b.person_name(), "people.person", *dict.fromkeys(extra))
            for x in dict.fromkeys(extra):
                by_role[x].append(p)
            people.append(p)
    for _ in range(n(480)):  # people with no other role
        people.append(b.entity(b.person_name(), "people.person"))
    for p in people:
        b.link(p, "people.person.place_of_birth", r.choice(cities))
        b.link(p, "people.person.nationality", r.choice(countries))
        for prof in r.sample(professions, r.choice((1, 1, 2))):
            b.link(p, "people.person.profession", prof)
        b.attr(p, "people.person.height_meters", round(r.uniform(1.45, 2.15), 3))

    universities = []
    for _ in range(n(60)):
        u = b.entity(
            b.unique(lambda: f"University of {b.word(r.choice((2, 3)))}"),
            "education.university",
            "education.educational_institution",
        )
        b.attr(u, "education.university.total_enrollment", r.randint(800, 80000))
        universities.append(u)
    for p in people:
        for _ in range(r.choice((0, 1, 1, 2))):
            e = b.entity(None, "education.education")
            b.link(p, "people.person.education", e)
            b.link(e, "education.education.institution", r.choice(universities))
            b.link(e, "education.education.major_field_of_study", r.choice(fields_))

    for _ in range(n(300)):
        f = b.entity(b.title(), "film.film")
        b.link(f, "film.film.directed_by", r.choice(by_role["film.director"]))
        for gn in r.sample(film_genres, r.choice((1, 2))):
            b.link(f, "film.film.genre", gn)
        b.link(f, "film.film.country", r.choice(countries))
        b.attr(f, "film.film.running_time", round(r.uniform(70, 200), 1))
        for actor in r.sample(by_role["film.actor"], r.randint(3, 6)):
            perf = b.entity(None, "film.performance")
            b.link(f, "film.film.starring", perf)
            b.link(actor, "film.actor.film", perf)
            ch = b.entity(b.person_name(), "film.film_character")
            b.link(perf, "film.performance.character", ch)

    artists = [
        b.entity(
            b.unique(lambda: r.choice((f"The {r.choice(_ADJ)} {r.choice(_NOUN)}s", f"{b.word(2)} {b.word(2)}"))), "music.artist"
        )
        for _ in range(n(120))
    ]
    for a in artists:
        b.link(a, "music.artist.label", r.choice(labels))
    for _ in range(n(400)):
        al = b.entity(b.title(), "music.album")
        b.link(r.choice(artists), "music.artist.album", al)
        b.link(al, "music.album.genre", r.choice(music_genres))
        b.attr(al, "music.album.length", round(r.uniform(1200, 4800), 1))

    for _ in range(n(400)):
        w = b.entity(b.title(), "book.written_work")
        for a in r.sample(by_role["book.author"], r.choice((1, 1, 1, 2))):
            b.link(a, "book.author.works_written", w)
        for s in r.sample(subjects, r.choice((1, 2))):
            b.link(w, "book.written_work.subjects", s)
        b.attr(w, "book.written_work.number_of_pages", r.randint(80, 1400))

    sport_positions = {s: r.sample(positions, 3) for s in sports}
    teams_by_sport: dict[str, list[str]] = defaultdict(list)
    for _ in range(n(60)):
        s = r.choice(sports)
        t = b.entity(b.unique(lambda: f"{b.word(2)} {r.choice(_NOUN)}s"), "sports.sports_team")
        b.link(t, "sports.sports_team.sport", s)
        b.link(t, "sports.sports_team.location", r.choice(cities))
        b.attr(t, "sports.sports_team.founded", r.randint(1870, 2015))
        teams_by_sport[s].append(t)
    team_sports = [s for s in sports if teams_by_sport[s]]
    for a in by_role["sports.pro_athlete"]:
        s = r.choice(team_sports)
        for t in r.sample(teams_by_sport[s], min(len(teams_by_sport[s]), r.choice((1, 2, 3)))):
            ro = b.entity(None, "sports.sports_team_roster")
            b.link(t, "sports.sports_team.roster", ro)
            b.link(a, "sports.pro_athlete.teams", ro)
            b.link(ro, "sports.sports_team_roster.position", r.choice(sport_positions[s]))

    for _ in range(n(150)):
        o = b.entity(
            b.unique(lambda: f"{b.word(2)} {r.choice(('Industries', 'Group', 'Labs', 'Foundation', 'Works'))}"),
            "organization.organization",
        )
        for f in r.sample(by_role["organization.organization_founder"], r.choice((1, 1, 2))):
            b.link(o, "organization.organization.founders", f)
        b.link(o, "organization.organization.place_founded", r.choice(cities))
        b.attr(o, "organization.organization.number_of_employees", r.randint(5, 250000))
    return b.g, b._order


_DATATYPE = {a: t for a, _, t in _ATTRIBUTES}


def _literal(value: float | int, attribute: str) -> str:
    return f'"{value}"^^<{XSD}{_DATATYPE[attribute]}>'


def ntriples(g: Graph, order: list[str]) -> str:
    """The graph as N-Triples, entity by entity in creation order (deterministic)."""
    lines: list[str] = []
    add = lines.append
    for m in order:
        s = f"<{NS}{m}>"
        name = g.names.get(m)
        if name is not None:
            add(f'{s} <{NS}type.object.name> "{_escape(name)}"@en .')
        for t in g.types[m]:
            add(f"{s} <{NS}type.object.type> <{NS}{t}> .")
        for rel, objs in g.edges.get(m, {}).items():
            for o in objs:
                add(f"{s} <{NS}{rel}> <{NS}{o}> .")
        for a, v in g.attrs.get(m, {}).items():
            add(f"{s} <{NS}{a}> {_literal(v, a)} .")
    g.triples = len(lines)
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# ---------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Path_:
    """A chain of relations from an anchor type and the phrase that asks for its end."""

    anchor_type: str
    relations: tuple[str, ...]
    question: str  # {e}: the anchor's name


_PATHS: dict[str, list[Path_]] = {
    "one_hop": [
        Path_("film.film", ("film.film.directed_by",), "who directed {e}?"),
        Path_("people.person", ("people.person.place_of_birth",), "where was {e} born?"),
        Path_("music.album", ("music.album.artist",), "which artist released the album {e}?"),
        Path_("book.written_work", ("book.written_work.author",), "who is the author of {e}?"),
        Path_("location.country", ("location.location.contains",), "what locations are contained by {e}?"),
        Path_("organization.organization", ("organization.organization.founders",), "who founded {e}?"),
        Path_("film.director", ("film.director.film",), "what films were directed by {e}?"),
        Path_("music.artist", ("music.artist.album",), "what albums has {e} released?"),
        Path_("sports.sports_team", ("sports.sports_team.sport",), "what sport does {e} play?"),
        Path_("people.person", ("people.person.profession",), "what is the profession of {e}?"),
    ],
    "two_hop": [
        Path_("film.film", ("film.film.starring", "film.performance.actor"), "who acted in {e}?"),
        Path_("film.actor", ("film.actor.film", "film.performance.film"), "which films did {e} act in?"),
        Path_(
            "sports.pro_athlete",
            ("sports.pro_athlete.teams", "sports.sports_team_roster.team"),
            "which teams has {e} played for?",
        ),
        Path_(
            "sports.sports_team",
            ("sports.sports_team.roster", "sports.sports_team_roster.player"),
            "which athletes have played for {e}?",
        ),
        Path_(
            "people.person", ("people.person.education", "education.education.institution"), "which university did {e} attend?"
        ),
        Path_(
            "book.written_work", ("book.written_work.author", "people.person.place_of_birth"), "where was the author of {e} born?"
        ),
        Path_("music.album", ("music.album.artist", "music.artist.label"), "which record label is the artist of {e} signed to?"),
        Path_(
            "film.film", ("film.film.directed_by", "people.person.nationality"), "what is the nationality of the director of {e}?"
        ),
        Path_(
            "sports.pro_athlete",
            ("sports.pro_athlete.teams", "sports.sports_team_roster.position"),
            "what position does {e} play?",
        ),
    ],
    "three_hop": [
        Path_(
            "film.film",
            ("film.film.starring", "film.performance.actor", "people.person.place_of_birth"),
            "where were the actors of {e} born?",
        ),
        Path_(
            "sports.sports_team",
            ("sports.sports_team.roster", "sports.sports_team_roster.player", "people.person.nationality"),
            "what are the nationalities of the athletes who played for {e}?",
        ),
        Path_(
            "film.director",
            ("film.director.film", "film.film.starring", "film.performance.actor"),
            "which actors appeared in films directed by {e}?",
        ),
        Path_(
            "organization.organization",
            ("organization.organization.founders", "people.person.place_of_birth", "location.location.containedby"),
            "in which country were the founders of {e} born?",
        ),
        Path_(
            "book.written_work",
            ("book.written_work.author", "people.person.education", "education.education.institution"),
            "where did the author of {e} study?",
        ),
    ],
}
#: Intersections: two (anchor type, relations) paths that end in the same type, and the question.
_INTERSECTIONS: list[tuple[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]], str]] = [
    (
        ("film.actor", ("film.actor.film", "film.performance.film")),
        ("film.director", ("film.director.film",)),
        "which film directed by {b} stars {a}?",
    ),
    (
        ("book.author", ("book.author.works_written",)),
        ("book.book_subject", ("book.book_subject.works",)),
        "which works about {b} were written by {a}?",
    ),
    (
        ("location.citytown", ("location.location.people_born_here",)),
        ("people.profession", ("people.profession.people_with_this_profession",)),
        "which {b_lower} was born in {a}?",
    ),
    (
        ("music.artist", ("music.artist.album",)),
        ("music.genre", ("music.genre.albums",)),
        "which {b_lower} albums did {a} release?",
    ),
    (
        ("location.country", ("location.country.nationals",)),
        ("education.university", ("education.educational_institution.students_graduates", "education.education.student")),
        "which {a} nationals studied at {b}?",
    ),
]
_COUNTS: list[Path_] = [
    Path_("film.director", ("film.director.film",), "how many films did {e} direct?"),
    Path_("music.artist", ("music.artist.album",), "how many albums has {e} released?"),
    Path_("book.author", ("book.author.works_written",), "how many works did {e} write?"),
    Path_("film.actor", ("film.actor.film", "film.performance.film"), "how many films has {e} acted in?"),
    Path_("location.country", ("location.location.contains",), "how many locations does {e} contain?"),
    Path_("sports.sport", ("sports.sport.teams",), "how many teams play {e}?"),
]
#: Superlatives: a path, the attribute, argmax or argmin, and the question.
_SUPERLATIVES: list[tuple[Path_, str, str]] = [
    (
        Path_("location.country", ("location.location.contains",), "what is the largest location in {e} by area?"),
        "location.location.area",
        "argmax",
    ),
    (
        Path_("location.country", ("location.location.contains",), "which location in {e} has the smallest population?"),
        "topic_server.population_number",
        "argmin",
    ),
    (
        Path_("film.director", ("film.director.film",), "which film directed by {e} has the longest running time?"),
        "film.film.running_time",
        "argmax",
    ),
    (
        Path_("book.author", ("book.author.works_written",), "what is the shortest work written by {e}?"),
        "book.written_work.number_of_pages",
        "argmin",
    ),
    (
        Path_("sports.sport", ("sports.sport.teams",), "which {e} team was founded earliest?"),
        "sports.sports_team.founded",
        "argmin",
    ),
    (
        Path_(
            "sports.sports_team",
            ("sports.sports_team.roster", "sports.sports_team_roster.player"),
            "who is the tallest athlete who played for {e}?",
        ),
        "people.person.height_meters",
        "argmax",
    ),
    (Path_("music.genre", ("music.genre.albums",), "what is the longest {e} album?"), "music.album.length", "argmax"),
]
MAX_ANSWERS = 25


def _s_join(relations: tuple[str, ...], mid: str) -> str:
    expr = mid
    for rel in relations:
        expr = f"(JOIN (R {rel}) {expr})"
    return expr


def _actions(relations: tuple[str, ...], anchor: str, first_var: int) -> tuple[list[str], int]:
    acts: list[str] = []
    cur = anchor
    var = first_var
    for rel in relations:
        acts.append(f"get_relations({cur})")
        acts.append(f"get_neighbors({cur},{rel})")
        cur = f"#{var}"
        var += 1
    return acts, var - 1


class _QuestionMaker:
    def __init__(self, g: Graph, seed: int) -> None:
        self.g = g
        self.rng = random.Random(seed * 7919 + 17)
        self.seen: set[str] = set()
        self._named_cache: dict[str, list[str]] = {}

    def _named(self, t: str) -> list[str]:
        if t not in self._named_cache:
            self._named_cache[t] = [m for m in self.g.by_type.get(t, []) if m in self.g.names]
        return self._named_cache[t]

    def _answer(self, mids: set[str]) -> list[dict[str, Any]]:
        return [{"answer_type": "Entity", "answer_argument": m, "entity_name": self.g.names.get(m, m)} for m in sorted(mids)]

    def _ok(self, answer: set[str]) -> bool:
        return 0 < len(answer) <= MAX_ANSWERS

    def _end_type_ok(self, relations: tuple[str, ...], answer: set[str]) -> bool:
        # AgentBench types a variable by its relation's range: keep answers that carry that type.
        t = GENERATED.range_of[relations[-1]]
        return all(t in self.g.types[m] for m in answer)

    def path(self, p: Path_) -> dict[str, Any] | None:
        anchor = self.rng.choice(self._named(p.anchor_type))
        ans = {anchor}
        for rel in p.relations:
            ans = self.g.follow(ans, rel)
        ans.discard(anchor)
        if not self._ok(ans) or not self._end_type_ok(p.relations, ans):
            return None
        acts, last = _actions(p.relations, anchor, 0)
        t = GENERATED.range_of[p.relations[-1]]
        return self._item(
            p.question.format(e=self.g.names[anchor]),
            {anchor},
            f"(AND {t} {_s_join(p.relations, anchor)})",
            acts,
            self._answer(ans),
        )

    def intersection(self, spec) -> dict[str, Any] | None:
        (ta, ra), (tb, rb), q = spec
        a, b_ = self.rng.choice(self._named(ta)), self.rng.choice(self._named(tb))
        sa, sb = {a}, {b_}
        for rel in ra:
            sa = self.g.follow(sa, rel)
        for rel in rb:
            sb = self.g.follow(sb, rel)
        ans = (sa & sb) - {a, b_}
        if not self._ok(ans) or ans == sa or ans == sb:
            return None
        acts_a, last_a = _actions(ra, a, 0)
        acts_b, last_b = _actions(rb, b_, last_a + 1)
        acts = [*acts_a, *acts_b, f"intersection(#{last_a},#{last_b})"]
        t = GENERATED.range_of[ra[-1]]
        assert t == GENERATED.range_of[rb[-1]], (ra, rb)
        na, nb = self.g.names[a], self.g.names[b_]
        text = q.format(a=na, b=nb, b_lower=nb.lower())
        s_expr = f"(AND {t} (AND {_s_join(ra, a)} {_s_join(rb, b_)}))"
        return self._item(text, {a, b_}, s_expr, acts, self._answer(ans))

    def count(self, p: Path_) -> dict[str, Any] | None:
        anchor = self.rng.choice(self._named(p.anchor_type))
        ans = {anchor}
        for rel in p.relations:
            ans = self.g.follow(ans, rel)
        ans.discard(anchor)
        if not ans:
            return None
        acts, last = _actions(p.relations, anchor, 0)
        acts.append(f"count(#{last})")
        t = GENERATED.range_of[p.relations[-1]]
        answer = [{"answer_type": "Value", "answer_argument": str(len(ans))}]
        return self._item(
            p.question.format(e=self.g.names[anchor]), {anchor}, f"(COUNT (AND {t} {_s_join(p.relations, anchor)}))", acts, answer
        )

    def superlative(self, spec) -> dict[str, Any] | None:
        p, attribute, op = spec
        anchor = self.rng.choice(self._named(p.anchor_type))
        cands = {anchor}
        for rel in p.relations:
            cands = self.g.follow(cands, rel)
        cands.discard(anchor)
        valued = [(self.g.attrs[m][attribute], m) for m in cands if attribute in self.g.attrs.get(m, {})]
        if len(valued) < 2:
            return None
        best = (max if op == "argmax" else min)(v for v, _ in valued)
        ans = {m for v, m in valued if v == best}
        if len(ans) != 1:
            return None
        acts, last = _actions(p.relations, anchor, 0)
        acts += [f"get_attributes(#{last})", f"{op}(#{last},{attribute})"]
        t = GENERATED.range_of[p.relations[-1]]
        s_expr = f"({op.upper()} (AND {t} {_s_join(p.relations, anchor)}) {attribute})"
        return self._item(p.question.format(e=self.g.names[anchor]), {anchor}, s_expr, acts, self._answer(ans))

    def _item(
        self, question: str, anchors: set[str], s_expr: str, actions: list[str], answer: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        if s_expr in self.seen or question in self.seen:
            return None
        self.seen.update((s_expr, question))
        return {
            "question": question,
            "entities": {self.g.names[m]: m for m in sorted(anchors, key=lambda m: self.g.names[m])},
            "s_expression": s_expr,
            "actions": actions,
            "answer": answer,
        }

    def make(self, kind: str, i: int) -> dict[str, Any] | None:
        if kind in _PATHS:
            return self.path(_PATHS[kind][i % len(_PATHS[kind])])
        if kind == "intersection":
            return self.intersection(_INTERSECTIONS[i % len(_INTERSECTIONS)])
        if kind == "count":
            return self.count(_COUNTS[i % len(_COUNTS)])
        return self.superlative(_SUPERLATIVES[i % len(_SUPERLATIVES)])


def make_questions(g: Graph, seed: int = DEFAULT_SEED, sizes: dict[str, int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Questions per split; within a kind, templates rotate; no question is in two splits."""
    sizes = sizes or SPLIT_SIZES
    maker = _QuestionMaker(g, seed)
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in sizes}
    for kind in KINDS:
        i = attempts = 0
        for split, want in sizes.items():
            got = 0
            while got < want:
                attempts += 1
                if attempts > 200 * (sum(sizes.values()) + 1):
                    raise RuntimeError(f"could not make enough {kind} questions; use a larger --scale")
                item = maker.make(kind, i)
                i += 1
                if item is None:
                    continue
                item = {
                    "question": item["question"],
                    "qid": f"kg-{seed}-{split}-{len(out[split])}",
                    "source": f"agentrl-generated:{kind}",
                    **{k: v for k, v in item.items() if k != "question"},
                }
                out[split].append(item)
                got += 1
    return out


def scale_for_triples(target: int, seed: int = DEFAULT_SEED) -> float:
    """The scale whose graph has at least ``target`` triples (measured on scale 1)."""
    g, order = build_graph(seed, 1.0)
    per_unit = len(ntriples(g, order).splitlines())
    return max(1.0, round(target / per_unit * 1.02, 2))


def write(out: str | Path, seed: int = DEFAULT_SEED, scale: float = 1.0, splits: bool = True) -> dict[str, Any]:
    """Write graph.nt, ontology/ and the split files into ``out``; return a summary."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    g, order = build_graph(seed, scale)
    (d / "graph.nt").write_text(ntriples(g, order))
    GENERATED.write(d / "ontology", _DOMAINS)
    summary: dict[str, Any] = {"seed": seed, "scale": scale, "entities": len(order), "triples": g.triples}
    if splits:
        for split, items in make_questions(g, seed).items():
            (d / f"{split}.json").write_text(dump_split(items))
            summary[split] = len(items)
    return summary


def dump_split(items: list[dict[str, Any]]) -> str:
    return json.dumps(items, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrl_env_kg.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write graph.nt, ontology/ and the split files into")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--scale", type=float, default=None, help="entity multiplier (1: ~8k entities, ~60k triples)")
    size.add_argument("--triples", type=int, default=None, help="pick the scale that gives at least this many triples")
    args = ap.parse_args(argv)
    scale = args.scale or 1.0
    if args.triples:
        scale = scale_for_triples(args.triples, args.seed)
        print(f"scale {scale} for >= {args.triples} triples", file=sys.stderr)
    summary = write(args.out, args.seed, scale)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
