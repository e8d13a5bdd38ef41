"""Proposing with a trained model, alone or beside the rules (`rules+history`).

The model proposes only inside the rubric: its labels pass the same policy guard as the rules'.
Beside the rules it adds what they left open, and where the two disagree the proposal says so
and its confidence drops. Its evidence is the terms that weighed most, with their spans in the
issue, and how many of the most similar training issues carry the label.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from triage.learning import features
from triage.learning.model import rows
from triage.rubric.engine import Draft, guard

if TYPE_CHECKING:
    from collections.abc import Sequence

    from triage.learning.model import Model, Row
    from triage.rubric.engine import IssueInput
    from triage.rubric.loader import Rubric

PROPOSER = "rules+history"
LEARNED_ALONE = "history"
# Chosen by 5-fold cross-validation on the tune split of the real index (`triage/devset/`).
# The model adds a label the rules left open from this calibrated probability on, and only
# where its training showed that label right often enough (`training.gate`).
ADD_AT = 0.7
# A label the rules add that the model gives less than this is a disagreement.
DISAGREE_BELOW = 0.2
# A proposal with a disagreement keeps this share of its confidence.
DISAGREEMENT_FACTOR = 0.75
# Below this the history overrules the rules: their label is left out, and the proposal says so.
VETO_BELOW = 0.05
# What the history adds alone stays just below the rubric's high tier.
HISTORY_CAP = 0.99


@dataclass(frozen=True)
class Learned:
    """A model ready to propose: its version (0 when it was never stored) and row id."""

    model: Model
    version: int = 0
    row_id: int | None = None


@dataclass(frozen=True)
class Assessment:
    issue: IssueInput
    # The issue's text as the model read it (`features.masked_sources`), and its features.
    sources: list[tuple[str, str]]
    row: Row
    probabilities: dict[str, float]
    # Rows of the model's most similar training issues.
    neighbours: list[int]


def assess(learned: Learned, issues: Sequence[IssueInput]) -> list[Assessment]:
    """The model's probabilities for many issues, in one matrix product."""
    if not issues:
        return []
    model = learned.model
    sources = [features.masked_sources(issue) for issue in issues]
    x = model.matrix(issues, sources)
    probabilities = model.probabilities(x)
    neighbours = model.neighbours(x)
    features_of = rows(x)
    return [
        Assessment(
            issue=issue,
            sources=sources[i],
            row=features_of[i],
            probabilities={
                label: float(probabilities[i, j]) for j, label in enumerate(model.labels)
            },
            neighbours=neighbours[i],
        )
        for i, issue in enumerate(issues)
    ]


def _proposed(learned: Learned, assessment: Assessment, exclude: set[str]) -> list[str]:
    """The labels the model proposes on its own: sure enough, and for a label whose
    proposals were right often enough in training."""
    present = set(assessment.issue.labels)
    gates = dict(zip(learned.model.labels, learned.model.thresholds, strict=True))
    ranked = sorted(assessment.probabilities.items(), key=lambda item: -item[1])
    return [
        label
        for label, probability in ranked
        if probability >= max(ADD_AT, gates[label])
        and label not in present
        and label not in exclude
    ]


def evidence(
    learned: Learned, assessment: Assessment, labels: Sequence[str]
) -> list[dict[str, Any]]:
    """Per label: its probability, the terms that weighed most (with spans), the neighbours."""
    model = learned.model
    index = {label: j for j, label in enumerate(model.labels)}
    known = [label for label in labels if label in index]
    if not known:
        return []
    shown = []
    for label in known:
        j = index[label]
        terms = []
        for term in model.terms(assessment.row, j):
            span = features.find_span(assessment.sources, term.feature)
            terms.append(
                {
                    "term": term.term,
                    "weight": round(term.weight, 3),
                    "source": span.source if span else "",
                    "start": span.start if span else 0,
                    "end": span.end if span else 0,
                    "evidence": span.text if span else "",
                }
            )
        similar = model.neighbours_for(assessment.neighbours, j)
        shown.append(
            {
                "label": label,
                "probability": round(assessment.probabilities[label], 3),
                "terms": terms,
                "neighbours": list(similar.numbers),
                "carrying": list(similar.carrying),
            }
        )
    return shown


def learned_alone(rubric: Rubric, learned: Learned, assessment: Assessment) -> Draft:
    """The model's own proposal: what it is sure enough of, no rule involved."""
    add = _proposed(learned, assessment, set())
    draft = Draft(
        proposer=LEARNED_ALONE,
        proposer_version=str(learned.version),
        rubric_version=rubric.version,
        add=tuple(add),
        remove=(),
        template="",
        comment="",
        close=False,
        score=0.0,
        tier="low",
        rationale="",
        citations=(),
    )
    draft = guard(rubric, draft, assessment.issue.labels)
    if draft.add:
        score = min(assessment.probabilities[label] for label in draft.add)
        rationale = "Learned from past triage: " + ", ".join(
            f"{label} ({assessment.probabilities[label]:.2f})" for label in draft.add
        )
    else:
        score = rubric.no_rule_score
        rationale = "The model is sure of no label for this issue."
    return replace(
        draft,
        score=round(score, 3),
        tier=rubric.tier(score),
        rationale=rationale,
        learned={"model": learned.version, "labels": evidence(learned, assessment, draft.add)},
        learned_model=learned.row_id,
    )


def beside_rules(rubric: Rubric, learned: Learned, assessment: Assessment, rules: Draft) -> Draft:
    """The rules' proposal, with what the model adds where they left it open, and their
    disagreements: the rules' labels the model thinks wrong, the model's the rules excluded."""
    probabilities = assessment.probabilities
    ruled = set(rules.add)
    wanted = _proposed(learned, assessment, ruled | set(rules.remove))
    disagreements: list[dict[str, Any]] = []
    vetoed: list[str] = []
    for label in rules.add:
        probability = probabilities.get(label)
        if probability is not None and probability < DISAGREE_BELOW:
            why = f"the rules add {label}; the history gives it {probability:.2f}"
            if probability < VETO_BELOW:
                vetoed.append(label)
                why += ", so it is left out"
            disagreements.append({"label": label, "probability": round(probability, 3), "why": why})
    for label in rules.remove:
        probability = probabilities.get(label)
        if probability is not None and probability >= ADD_AT:
            disagreements.append(
                {
                    "label": label,
                    "probability": round(probability, 3),
                    "why": f"the rules remove {label}; the history gives it {probability:.2f}",
                }
            )
    kept = tuple(label for label in rules.add if label not in vetoed)
    combined = guard(
        rubric, replace(rules, add=(*kept, *wanted), dropped=()), assessment.issue.labels
    )
    added = [label for label in combined.add if label not in ruled]
    for dropped in combined.dropped:
        if dropped.action == "add" and dropped.label in wanted and "group" in dropped.reason:
            # The rules chose another label of the same exclusive group.
            disagreements.append(
                {
                    "label": dropped.label,
                    "probability": round(probabilities[dropped.label], 3),
                    "why": f"the history proposes {dropped.label} ({probabilities[dropped.label]:.2f}); "
                    f"the rules chose otherwise",
                }
            )
    score = rules.score if rules.rules_fired or not added else 1.0
    if added:
        # A label only the history proposes is never "high": on the real index's tune split
        # the model's own labels at 0.8 and over were right one time in three (pt2).
        score = min(
            score, *(probabilities[label] for label in added), HISTORY_CAP * rubric.high_tier
        )
    if disagreements:
        score *= DISAGREEMENT_FACTOR
    rationale = rules.rationale
    if added:
        rationale += (
            " The history adds "
            + ", ".join(f"{label} ({probabilities[label]:.2f})" for label in added)
            + "."
        )
    if disagreements:
        rationale += (
            " The rules and the history disagree: "
            + "; ".join(d["why"] for d in disagreements)
            + "."
        )
    shown = [label for label in combined.add if label in added or label in probabilities]
    return replace(
        combined,
        proposer=PROPOSER,
        proposer_version=f"rules-{rules.proposer_version}+history-{learned.version}",
        dropped=(*rules.dropped, *combined.dropped),
        score=round(score, 3),
        tier=rubric.tier(score),
        rationale=rationale.strip(),
        learned={
            "model": learned.version,
            "added": added,
            "labels": evidence(learned, assessment, shown),
            "disagreements": disagreements,
        },
        learned_model=learned.row_id,
    )
