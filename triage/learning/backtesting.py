"""Scoring the learned proposer, alone and beside the rules, on files of labelled issues.

Trained on one file and scored on another (`backtest --train`), or cross-validated on one
(`backtest --cv K`: K folds by issue number, each scored by a model that never saw it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage import backtest
from triage.learning import proposer, training
from triage.learning.proposer import Learned
from triage.rubric import engine

if TYPE_CHECKING:
    from collections.abc import Sequence

    from triage.backtest import Case, Proposer
    from triage.rubric.engine import Draft, IssueInput
    from triage.rubric.loader import Rubric

RULES = "rules"
NAMES = (RULES, proposer.LEARNED_ALONE, proposer.PROPOSER)


def examples(cases: Sequence[Case]) -> list[training.Example]:
    return [training.Example(case.issue, case.truth) for case in cases]


def latest(cases: Sequence[Case], limit: int | None) -> list[Case]:
    """The `limit` newest issues (by number): the history a queue would have at hand."""
    ordered = sorted(cases, key=lambda case: case.issue.number)
    return ordered if limit is None else ordered[-limit:]


def proposer_for(name: str, rubric: Rubric, learned_for: dict[int, Learned]) -> Proposer:
    """A backtest proposer that asks the model trained for the issue (by its number)."""

    def propose(rubric: Rubric, issue: IssueInput) -> Draft:
        rules = engine.propose(rubric, issue)
        if name == RULES:
            return rules
        learned = learned_for[issue.number]
        assessment = proposer.assess(learned, [issue])[0]
        if name == proposer.LEARNED_ALONE:
            return proposer.learned_alone(rubric, learned, assessment)
        return proposer.beside_rules(rubric, learned, assessment, rules)

    return propose


def folds(cases: Sequence[Case], k: int) -> list[list[Case]]:
    """K folds by issue number: the issues in number order, dealt out in turn."""
    ordered = sorted(cases, key=lambda case: case.issue.number)
    return [ordered[i::k] for i in range(k)]


def trained_per_issue(
    rubric: Rubric, train: Sequence[Case], test: Sequence[Case]
) -> dict[int, Learned]:
    learned = Learned(model=training.train(examples(train), rubric))
    return {case.issue.number: learned for case in test}


def cross_validated(rubric: Rubric, cases: Sequence[Case], k: int) -> dict[int, Learned]:
    """For each issue, the model trained on the other folds."""
    per_issue: dict[int, Learned] = {}
    dealt = folds(cases, k)
    for i, fold in enumerate(dealt):
        rest = [case for j, other in enumerate(dealt) if j != i for case in other]
        per_issue |= trained_per_issue(rubric, rest, fold)
    return per_issue


def score_all(
    rubric: Rubric,
    cases: Sequence[Case],
    learned_for: dict[int, Learned],
    skip: frozenset[str] = frozenset(),
) -> dict[str, backtest.Report]:
    return {
        name: backtest.score(cases, rubric, proposer_for(name, rubric, learned_for), name, skip)
        for name in NAMES
    }


def format_comparison(reports: dict[str, dict[str, backtest.Report]]) -> str:
    """One line per proposer and split: micro figures and the precision of each tier."""
    lines = [
        f"{'proposer':14} {'split':6} {'issues':>6} {'micro P':>7} {'R':>6} {'F1':>6}   "
        f"{'high P':>6} {'cov':>5}  {'med P':>6} {'cov':>5}  {'low P':>6} {'cov':>5}"
    ]
    for name, by_split in reports.items():
        for split, report in by_split.items():
            micro = report.micro()
            tiers = report.tier_summary()
            cells = "  ".join(
                f"{tiers[tier]['precision']:6.3f} {tiers[tier]['coverage']:5.2f}"
                for tier in ("high", "medium", "low")
            )
            lines.append(
                f"{name:14} {split or 'all':6} {report.issues:6d} {micro.precision:7.3f} "
                f"{micro.recall:6.3f} {micro.f1:6.3f}   {cells}"
            )
    return "\n".join(lines)
