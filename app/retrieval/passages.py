"""A message's passages: the sentences of a turn that tells several things, each embedded alone.

One vector per turn averages what the turn says. "We moved to Lisbon in May. The kids love
their new school." answers both "where does she live?" and "how are the children doing?", yet
its single vector is a blend that matches neither question well. Embedding each sentence too
lets a question meet the sentence that answers it (docs/retrieval.md, "Passages": multi-hop
questions gain most, because their evidence is often one clause of a longer turn).

Pure: the write paths embed what `passages` returns; the query mixes the best passage's cosine
with the whole turn's (`RetrievalPreset.passage_weight`).
"""

from __future__ import annotations

import re

from app.retrieval.speakers import usable_speaker

# A sentence ends at ., ! or ? followed by white space. Crude on "Dr. Smith" or "e.g. this",
# which then makes one more (shorter) passage: harmless, the whole turn is still scored too.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MIN_WORDS = 3  # shorter sentences ("Wow!", "Thanks so much.") say nothing alone
# A turn of fewer words is one thought: its sentences alone are fragments whose vectors match
# questions by accident. Measured on LoCoMo (docs/retrieval.md, "Passages"): passages for turns
# of 20+ words only scored higher than for every turn, on both halves of the development set,
# with 27 % fewer passage rows to store and scan.
MIN_TURN_WORDS = 20
MAX_PASSAGES = 16  # embedding cost per message is bounded: the rest stays in the whole vector
MAX_PASSAGE_CHARS = 1000


def passages(content: str, speaker: object = None) -> list[str]:
    """The texts to embed for a message's passages: [] when it has fewer than
    `MIN_TURN_WORDS` words or fewer than two sentences of `MIN_WORDS` words (its own vector
    says it all).

    A named speaker (`metadata.speaker`) prefixes each passage ("Tim: I play the violin."), as
    it prefixes the turn for a reader; a leading "<speaker>:" in the content is not repeated.
    """
    words = content.split()
    if len(words) < MIN_TURN_WORDS:
        return []
    name = usable_speaker(speaker)
    body = " ".join(words)
    if name is not None and body.casefold().startswith(name.casefold() + ":"):
        body = body[len(name) + 1 :].strip()
    sentences = [s for s in _SENTENCE_END.split(body) if len(s.split()) >= MIN_WORDS]
    if len(sentences) < 2:
        return []
    prefix = f"{name}: " if name is not None else ""
    return [prefix + s[:MAX_PASSAGE_CHARS] for s in sentences[:MAX_PASSAGES]]
