"""What the classifier reads of an issue: its words, its exception types and traceback frames.

The text is read as the rules read it (`signals.mask_noise`: no bot `cc @` lines, no
environment dump). The rules' signals are not features: scanning for them would cost more
than all the rest, and the rules already act on them. Every feature can be found
again in the issue's text, so the terms that weighed most are shown where they stand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triage.rubric.signals import mask_noise

if TYPE_CHECKING:
    from triage.rubric.engine import IssueInput

# `File "/usr/lib/python3/site-packages/torch/_inductor/graph.py", line 12` and bare paths.
# (No `\b` in front: a pattern that starts with a literal is searched for that literal first,
# twenty times faster.)
FRAME_PATH = re.compile(r"torch/[\w./]*\w\.py\b|torch/_\w+(?:/\w+)*")
# `torch._dynamo.exc.Unsupported`, `RuntimeError`, `torch.OutOfMemoryError`: found by the end of
# the name, then read backwards (a pattern that starts at every word costs ten times more).
EXCEPTION_END = re.compile(r"(?:Error|Exception|Unsupported|Failure|Warning)\b")
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
# How deep a frame's directory is kept as a feature: `torch/_inductor/codegen`.
FRAME_DEPTH = 3
# Structured features are prefixed so they never collide with a word.
FRAME = "frame:"
EXC = "exc:"


@dataclass(frozen=True, slots=True)
class Document:
    """An issue as the vectorizers read it."""

    title: str
    text: str
    structure: str


def masked_sources(issue: IssueInput) -> list[tuple[str, str]]:
    """(source name, text) as the rules see them: noise blanked, every offset unchanged."""
    return [(source.name, mask_noise(source.text)[0]) for source in issue.sources()]


def frame_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    for match in FRAME_PATH.finditer(text):
        path = match.group(0)
        parts = path.split("/")
        for depth in range(2, min(len(parts), FRAME_DEPTH) + 1):
            tokens.append(FRAME + "/".join(parts[:depth]))
        if path.endswith(".py"):
            tokens.append(FRAME + path)
    return tokens


def exception_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    for match in EXCEPTION_END.finditer(text):
        start = match.start()
        while start > 0 and text[start - 1] in NAME_CHARS:
            start -= 1
        name = text[start : match.end()].strip(".")
        last = name.rsplit(".", 1)[-1]
        if not last[:1].isupper():
            continue
        tokens.append(EXC + name)
        if last != name:
            tokens.append(EXC + last)
    return tokens


def document(issue: IssueInput, sources: list[tuple[str, str]] | None = None) -> Document:
    """The issue as the vectorizers read it; `sources`, its `masked_sources` if at hand."""
    sources = masked_sources(issue) if sources is None else sources
    text = "\n".join(text for _, text in sources)
    structure = [*frame_tokens(text), *exception_tokens(text)]
    return Document(title=sources[0][1], text=text, structure=" ".join(structure))


@dataclass(frozen=True, slots=True)
class Span:
    source: str
    start: int
    end: int
    text: str


def find_span(sources: list[tuple[str, str]], feature: str) -> Span | None:
    """Where a feature shows in the issue's `masked_sources`: the first place, title first."""
    block, _, term = feature.partition("|")
    if block == "structure":
        needle = term.partition(":")[2]
        pattern = re.compile(re.escape(needle))
    else:
        words = [re.escape(word) for word in term.split(" ")]
        pattern = re.compile(r"(?<![\w.])" + r"\W+".join(words) + r"(?![\w])", re.IGNORECASE)
    if block == "title":
        sources = sources[:1]
    for name, text in sources:
        match = pattern.search(text)
        if match is not None:
            return Span(name, match.start(), match.end(), match.group(0))
    return None
