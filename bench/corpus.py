"""Generated memories and questions: templates over real vocabulary, deterministic by seed.

The i-th text of a seed never depends on how many texts are asked for, so a small store is a
prefix of a big one and embeddings computed once are reused across sizes.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass

from bench import vocabulary as v

_POOLS: dict[str, tuple[str, ...]] = {
    "person": v.PEOPLE,
    "relation": v.RELATIONS,
    "city": v.CITIES,
    "job": v.JOBS,
    "food": v.FOODS,
    "drink": v.DRINKS,
    "addition": v.ADDITIONS,
    "meal": v.MEALS,
    "allergen": v.ALLERGENS,
    "pet": v.PETS,
    "petname": v.PET_NAMES,
    "skill": v.SKILLS,
    "place": v.PLACES,
    "tool": v.TOOLS,
    "tech": v.TECH,
    "project": v.PROJECTS,
    "activity": v.ACTIVITIES,
    "weekday": v.WEEKDAYS,
    "month": v.MONTHS,
    "year": v.YEARS,
    "time": v.TIMES,
    "event": v.EVENTS,
    "landmark": v.LANDMARKS,
    "book": v.BOOKS,
    "item": v.ITEMS,
    "store": v.STORES,
    "vendor": v.VENDORS,
    "product": v.PRODUCTS,
    "airport": v.AIRPORTS,
    "kind": v.RESTAURANT_KINDS,
    "language": v.LANGUAGES,
    "day": tuple(str(d) for d in range(1, 29)),
    "minutes": tuple(str(m) for m in range(84, 181)),
}

# (memory type, memory text, a question whose answer is that memory)
TEMPLATES: tuple[tuple[str, str, str], ...] = (
    (
        "fact",
        "{person}'s {relation} {person2} lives in {city} and works as a {job}.",
        "What does {person}'s {relation} do for a living?",
    ),
    ("fact", "{person} was born in {city} on {month} {day}, {year}.", "Where was {person} born?"),
    (
        "fact",
        "{person} adopted a {pet} named {petname} in {month} {year}.",
        "What is the name of {person}'s {pet}?",
    ),
    (
        "fact",
        "The user's {relation} {person} is allergic to {allergen}.",
        "Is my {relation} {person} allergic to anything?",
    ),
    (
        "fact",
        "{person} started learning {skill} at {place} in {month} {year}.",
        "When did {person} start learning {skill}?",
    ),
    (
        "fact",
        "The user's flight to {city} leaves on {weekday}, {month} {day} from {airport} at {time}.",
        "When does my flight to {city} leave?",
    ),
    (
        "fact",
        "{person} ran the {city} half marathon in {year} in {minutes} minutes.",
        "How fast did {person} run the {city} half marathon?",
    ),
    (
        "fact",
        "{person} moved from {city} to {city2} in {year} to work as a {job}.",
        "Why did {person} move to {city2}?",
    ),
    (
        "preference",
        "The user prefers {food} over {food2} for {meal}.",
        "What do I like to eat for {meal}?",
    ),
    (
        "preference",
        "{person} likes {drink} with {addition} in the morning.",
        "How does {person} take their {drink}?",
    ),
    (
        "preference",
        "The user wants meeting notes written in {tool} rather than {tool2}.",
        "Which tool should I use for meeting notes?",
    ),
    (
        "preference",
        "The user enjoys {activity} on {weekday} evenings with {person}.",
        "What do I usually do on {weekday} evenings?",
    ),
    (
        "preference",
        "{person} dislikes {food} and never orders it at {kind} restaurants.",
        "What food should I avoid ordering for {person}?",
    ),
    (
        "preference",
        "Use {language} for code examples when explaining {tech} to the user.",
        "Which language do I want code examples in for {tech}?",
    ),
    (
        "decision",
        "Decided to use {tech} instead of {tech2} for the {project} project.",
        "Which technology did we pick for the {project} project?",
    ),
    (
        "decision",
        "The team agreed to move the {project} launch to {month} {day}, {year}.",
        "When is the {project} launch now?",
    ),
    (
        "decision",
        "The user decided to book the hotel near {landmark} in {city} for the {event}.",
        "Where am I staying in {city} for the {event}?",
    ),
    (
        "decision",
        "Chose {vendor} as the supplier for {product} after comparing prices in {month}.",
        "Which supplier did we choose for {product}?",
    ),
    (
        "decision",
        "{person} will lead the {project} migration from {tech} to {tech2} starting {month}.",
        "Who is leading the {project} migration?",
    ),
    (
        "note",
        "Remember to call {person} about the {event} on {weekday} at {time}.",
        "Do I need to call anyone about the {event}?",
    ),
    (
        "note",
        "{person} recommended the book {book} during the {event}.",
        "Which book did {person} recommend?",
    ),
    (
        "note",
        "Pick up {item} from the {store} before {weekday}.",
        "What do I need to pick up from the {store}?",
    ),
    (
        "note",
        "The {project} budget review with {person} is scheduled for {month} {day} at {time}.",
        "When is the {project} budget review?",
    ),
    (
        "note",
        "{person} is visiting from {city} for the {event} in {month} "
        "and needs a ride from {airport}.",
        "Who needs a ride from the airport in {month}?",
    ),
)

_FIELD = re.compile(r"[a-z]+")
_ARTICLE = re.compile(r"\ba (?=[aeiouAEIOU])")


def _pool(field: str) -> tuple[str, ...]:
    return _POOLS[_FIELD.match(field).group(0)]  # type: ignore[union-attr]


_TEMPLATE_FIELDS = [
    sorted({name for _, name, _, _ in string.Formatter().parse(text) if name})
    for _, text, _ in TEMPLATES
]


def fingerprint() -> str:
    """Changes whenever templates or vocabulary change (cached embeddings then go stale)."""
    material = repr(TEMPLATES) + repr(sorted(_POOLS.items()))
    return hashlib.sha256(material.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Memory:
    type: str
    text: str
    question: str


def memories(seed: int) -> Iterator[Memory]:
    """An endless stream of distinct memories (duplicates are skipped, so each text is unique)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while True:
        index = rng.randrange(len(TEMPLATES))
        kind, text, question = TEMPLATES[index]
        values: dict[str, str] = {}
        for field in _TEMPLATE_FIELDS[index]:
            pool = _pool(field)
            choice = rng.choice(pool)
            # city2/tech2/... differ from city/tech: "moved from Lisbon to Lisbon" reads wrong.
            while field[-1].isdigit() and choice == values.get(field[:-1]):
                choice = rng.choice(pool)
            values[field] = choice
        body = _ARTICLE.sub("an ", text.format(**values))
        if body in seen:
            continue
        seen.add(body)
        yield Memory(kind, body, _ARTICLE.sub("an ", question.format(**values)))


def generate(seed: int, count: int) -> list[Memory]:
    """The first `count` memories of the seed's stream."""
    stream = memories(seed)
    return [next(stream) for _ in range(count)]


@dataclass(frozen=True)
class UserLayout:
    user_id: str
    start: int  # first item position in the store
    size: int
    big: bool


def layout(items: int, seed: int, *, big_size: int = 50_000) -> list[UserLayout]:
    """Skewed users: one big user per 250k items (at most big_size items, half of a small
    store), the rest with hundreds of items each (log-normal, median 300, 50..2000)."""
    rng = random.Random(seed + 7)
    big = min(big_size, items // 2)
    n_big = max(1, items // 250_000) if big > 0 else 0
    users: list[UserLayout] = []
    position = 0
    for k in range(n_big):
        users.append(UserLayout(f"bench-big-{k}", position, big, True))
        position += big
    n = 0
    while position < items:
        size = int(min(2000, max(50, rng.lognormvariate(math.log(300), 0.6))))
        size = min(size, items - position)
        if items - position - size < 50:  # no tiny tail user: fold it into this one
            size = items - position
        users.append(UserLayout(f"bench-u{n:05d}", position, size, False))
        position += size
        n += 1
    return users
