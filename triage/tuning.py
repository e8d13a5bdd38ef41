"""Suggested edits to a rubric, from what oncalls decided: a confidence per rule recalibrated
from how often humans kept its change, the rules to retire, and the label pairs humans keep
swapping with the words that tell them apart. Each edit is backtested on the decisions before a
rubric owner makes it in rules.toml; `backtest --retire / --set-confidence` runs the same edit.

The calibration is the one written at the top of every rules.toml: a rule's confidence is its
smoothed precision, (kept + 1) / (fired + 2), rounded to 0.05, and at most 0.75 while it fired
fewer than MIN_FIRINGS times: so few cases cannot show the 0.9 that "high" promises.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from django.db.models import Exists, OuterRef

from triage import backtest
from triage.judging import COMPLETION
from triage.models import Decision, VerdictLabel
from triage.rubric import engine
from triage.rubric.signals import mask_noise

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from triage.reports import Report
    from triage.rubric.loader import Rubric

MIN_FIRINGS = 20
STEP = 0.05
CAP_BELOW_MIN_FIRINGS = 0.75
# A rule whose change humans keep less often than this, over enough firings, costs more
# keystrokes than it saves.
RETIRE_BELOW = 0.25
# A swap seen fewer times is chance, not a habit.
MIN_SWAPS = 3
SWAPS_SHOWN = 5
# The words of a swap are read from the latest decisions of each side.
WORDS_FROM_DECISIONS = 200
WORDS_SHOWN = 6


class EditError(ValueError):
    pass


def calibrated(kept: int, fired: int) -> float:
    smoothed = (kept + 1) / (fired + 2)
    value = round(round(smoothed / STEP) * STEP, 2)
    if fired < MIN_FIRINGS:
        value = min(value, CAP_BELOW_MIN_FIRINGS)
    return value


@dataclass(frozen=True)
class Edit:
    """One change to a rubric: retire a rule, or set its confidence."""

    rule: str
    retire: bool = False
    confidence: float | None = None

    def apply(self, rubric: Rubric) -> Rubric:
        if self.rule == COMPLETION:
            if rubric.completion is None or self.retire or self.confidence is None:
                raise EditError("the completion can only have its confidence set")
            completion = replace(rubric.completion, confidence=self.confidence)
            return replace(rubric, completion=completion, version=f"{rubric.version}+{self}")
        if self.rule not in {rule.id for rule in rubric.rules}:
            raise EditError(f"{rubric.name} has no rule {self.rule!r}")
        if self.retire:
            rules = tuple(rule for rule in rubric.rules if rule.id != self.rule)
        else:
            assert self.confidence is not None
            rules = tuple(
                replace(rule, confidence=self.confidence) if rule.id == self.rule else rule
                for rule in rubric.rules
            )
        return replace(rubric, rules=rules, version=f"{rubric.version}+{self}")

    @property
    def flag(self) -> str:
        """The same edit as `backtest` arguments."""
        if self.retire:
            return f"--retire {self.rule}"
        return f"--set-confidence {self.rule}={self.confidence:.2f}"

    def __str__(self) -> str:
        if self.retire:
            return f"retire {self.rule}"
        return f"{self.rule} confidence {self.confidence:.2f}"


def parse_confidence(value: str) -> Edit:
    """RULE=VALUE, as `backtest --set-confidence` takes it."""
    rule, sep, number = value.rpartition("=")
    try:
        confidence = float(number)
    except ValueError:
        confidence = math.nan
    if not sep or not rule or not 0 <= confidence <= 1:
        raise EditError(f"--set-confidence takes RULE=VALUE with VALUE in [0, 1], not {value!r}")
    return Edit(rule, confidence=confidence)


def edited(rubric: Rubric, edits: list[Edit]) -> Rubric:
    for edit in edits:
        rubric = edit.apply(rubric)
    return rubric


@dataclass(frozen=True)
class Score:
    """What a backtest says about an edit: labels, and the precision of each tier."""

    f1: float
    precision: float
    recall: float
    # Decisions the proposal matched exactly: a rejection is matched by proposing nothing,
    # which no label figure counts.
    exact: int
    tiers: dict[str, dict[str, float | int]]

    @classmethod
    def of(cls, report: backtest.Report) -> Score:
        micro = report.micro()
        exact = sum(1 for entry in report.per_issue if not entry["missing"] and not entry["extra"])
        return cls(micro.f1, micro.precision, micro.recall, exact, report.tier_summary())


@dataclass(frozen=True)
class Suggestion:
    edit: Edit
    fired: int
    kept: int
    current: float
    after: Score | None = None


@dataclass(frozen=True)
class Swap:
    dropped: str
    added: str
    decisions: int
    # Words more common where humans chose `added` than where they kept `dropped`, and back.
    words_for_added: tuple[str, ...] = ()
    words_for_dropped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Suggestions:
    recalibrate: list[Suggestion]
    retire: list[Suggestion]
    # Rules with a change that fired too rarely here to recalibrate: (rule, fired).
    too_few: list[tuple[str, int]]
    swaps: list[Swap]
    backtested: int = 0
    before: Score | None = None
    min_firings: int = MIN_FIRINGS


def suggest(report: Report) -> Suggestions:
    """The edits the report's counts call for, not yet backtested (see `measure`)."""
    rubric = report.rubric
    confidences = {rule.id: rule.confidence for rule in rubric.rules}
    if rubric.completion is not None:
        confidences[COMPLETION] = rubric.completion.confidence
    recalibrate: list[Suggestion] = []
    retire: list[Suggestion] = []
    too_few: list[tuple[str, int]] = []
    for row in report.rules:
        if row.rule not in confidences:
            continue
        if row.fired < MIN_FIRINGS:
            too_few.append((row.rule, row.fired))
            continue
        current = confidences[row.rule]
        if row.rule != COMPLETION and row.kept / row.fired < RETIRE_BELOW:
            retire.append(Suggestion(Edit(row.rule, retire=True), row.fired, row.kept, current))
            continue
        suggested = calibrated(row.kept, row.fired)
        if abs(suggested - current) >= STEP - 1e-9:
            edit = Edit(row.rule, confidence=suggested)
            recalibrate.append(Suggestion(edit, row.fired, row.kept, current))
    swaps = [
        Swap(row.dropped, row.added, row.decisions)
        for row in report.substitutions
        if row.decisions >= MIN_SWAPS
    ][:SWAPS_SHOWN]
    return Suggestions(recalibrate, retire, too_few, swaps)


def measure(report: Report, found: Suggestions, cases: list[backtest.Case]) -> Suggestions:
    """Each edit backtested on `cases` (the report's latest decisions), and the words of each
    swap read from the decided issues."""

    def scored(rubric: Rubric) -> Score:
        return Score.of(backtest.score(cases, rubric, engine.propose, engine.PROPOSER))

    def with_effect(suggestion: Suggestion) -> Suggestion:
        return replace(suggestion, after=scored(suggestion.edit.apply(report.rubric)))

    return Suggestions(
        recalibrate=[with_effect(s) for s in found.recalibrate],
        retire=[with_effect(s) for s in found.retire],
        too_few=found.too_few,
        swaps=[telling_words(report, swap) for swap in found.swaps],
        backtested=len(cases),
        before=scored(report.rubric),
    )


WORD = re.compile(r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*")
# Words of every issue: they tell nothing apart.
STOPWORDS = frozenset(
    (
        "all",
        "also",
        "and",
        "any",
        "are",
        "but",
        "can",
        "could",
        "did",
        "does",
        "for",
        "from",
        "get",
        "got",
        "has",
        "have",
        "how",
        "into",
        "its",
        "just",
        "not",
        "one",
        "only",
        "our",
        "out",
        "set",
        "should",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "they",
        "this",
        "two",
        "use",
        "used",
        "using",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    )
)


def _words(title: str, body: str) -> set[str]:
    masked, _ = mask_noise(f"{title}\n{body}")
    return {w for w in WORD.findall(masked.lower()) if len(w) > 2 and w not in STOPWORDS}


def _issue_words(report: Report, chosen: QuerySet[VerdictLabel]) -> tuple[int, Counter[str]]:
    """In how many of the latest of these decisions each word appears."""
    start, end = report.period.bounds()
    in_range = chosen.filter(
        verdict__queue=report.queue,
        verdict__current=True,
        verdict__decided_at__gte=start,
        verdict__decided_at__lt=end,
    ).order_by("-verdict__decided_at")
    latest = in_range.values("verdict_id")[:WORDS_FROM_DECISIONS]
    issues = Decision.objects.filter(pk__in=latest).values_list(
        "proposal__issue__title", "proposal__issue__body"
    )
    seen: Counter[str] = Counter()
    read = 0
    for title, body in issues:
        seen.update(_words(title, body))
        read += 1
    return read, seen


def telling_words(report: Report, swap: Swap) -> Swap:
    """The words whose share of issues differs most between the two choices (a smoothed
    log-ratio of document frequencies), each seen in at least two issues of its side."""
    dropped_there = VerdictLabel.objects.filter(
        verdict=OuterRef("verdict"), label=swap.dropped, proposed=True, approved=False
    )
    # Where the human made this very swap, against where they kept the proposed label.
    n_added, added = _issue_words(
        report,
        VerdictLabel.objects.filter(label=swap.added, proposed=False, approved=True).filter(
            Exists(dropped_there)
        ),
    )
    n_dropped, dropped = _issue_words(
        report, VerdictLabel.objects.filter(label=swap.dropped, proposed=True, approved=True)
    )

    def leaning(
        mine: Counter[str], n_mine: int, theirs: Counter[str], n_theirs: int
    ) -> tuple[str, ...]:
        def weight(word: str) -> float:
            share = (mine[word] + 1) / (n_mine + 2)
            other = (theirs[word] + 1) / (n_theirs + 2)
            return math.log(share / other)

        ranked = sorted((w for w, n in mine.items() if n >= 2), key=lambda w: (-weight(w), w))
        return tuple(w for w in ranked if weight(w) > 0)[:WORDS_SHOWN]

    return replace(
        swap,
        words_for_added=leaning(added, n_added, dropped, n_dropped),
        words_for_dropped=leaning(dropped, n_dropped, added, n_added),
    )
