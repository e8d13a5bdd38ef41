"""What a human made of a proposal: its outcome, the rules whose change was kept, the labels
proposed and approved. Computed once per decision (`Verdict.record`) so that reports count in
the database, and again for the rows a report lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triage.models import Decision, Proposal
    from triage.rubric.loader import Rubric

# The engine cites the completion step (the `triaged` it adds) under this pseudo rule id.
COMPLETION = "completion"


def as_proposed(decision: Decision) -> bool:
    """Whether the approved change is exactly the proposal's, whatever button was pressed."""
    return (
        not any(decision.diff().values())
        and not decision.comment_changed
        and decision.close == decision.proposal.close
    )


def outcome(decision: Decision) -> str:
    if decision.kind == "escalate":
        return "escalated"
    if decision.kind == "reject":
        return "rejected"
    if decision.kind == "accept" or as_proposed(decision):
        return "accepted"
    return "edited"


def rules_cited(proposal: Proposal) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c["rule"] for c in proposal.citations if c.get("rule")))


def rule_change(rubric: Rubric, rule_id: str, proposal: Proposal) -> tuple[set[str], set[str]]:
    """The labels this rule added to and removed from this proposal.

    Only what reached the proposal counts: a label the policy guard dropped (already on the
    issue, say) was never offered, so a human could not have kept it. A rule id the rubric no
    longer has answers for the whole proposal.
    """
    add, remove = set(proposal.add_labels), set(proposal.remove_labels)
    rule = next((r for r in rubric.rules if r.id == rule_id), None)
    if rule is not None:
        return add & set(rule.add), remove & set(rule.remove)
    if rule_id == COMPLETION and rubric.completion is not None:
        return add & set(rubric.completion.add), set()
    return add, remove


@dataclass(frozen=True)
class Judgement:
    """What a human made of one proposal."""

    decision: Decision
    outcome: str
    proposed: frozenset[str]
    approved: frozenset[str]
    rules: tuple[str, ...]
    kept_rules: frozenset[str]
    # (dropped by the human, added by the human) for every such pair in this decision.
    substitutions: tuple[tuple[str, str], ...]

    @property
    def proposal(self) -> Proposal:
        return self.decision.proposal

    @property
    def tier(self) -> str:
        return self.decision.proposal.tier


def judge(decision: Decision, rubric: Rubric) -> Judgement:
    proposal = decision.proposal
    rejected = decision.kind == "reject"
    # A rejection writes nothing, whatever its row carries: it approves no label.
    approved: frozenset[str] = frozenset() if rejected else frozenset(decision.add_labels)
    approved_removals: set[str] = set() if rejected else set(decision.remove_labels)
    proposed = frozenset(proposal.add_labels)
    rules = rules_cited(proposal)
    kept: set[str] = set()
    for rule_id in rules:
        add, remove = rule_change(rubric, rule_id, proposal)
        if not rejected and add <= approved and remove <= approved_removals:
            kept.add(rule_id)
    return Judgement(
        decision=decision,
        outcome=outcome(decision),
        proposed=proposed,
        approved=approved,
        rules=rules,
        kept_rules=frozenset(kept),
        substitutions=tuple(product(sorted(proposed - approved), sorted(approved - proposed))),
    )
