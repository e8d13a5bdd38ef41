"""Reading a reviewer's decision from a form, against the queue's vocabulary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from triage.models import Decision, Proposal
from triage.rubric import loader
from triage.rubric.engine import FORBIDDEN_ALWAYS

if TYPE_CHECKING:
    from django.http import QueryDict


class DecisionError(ValueError):
    pass


def _labels(data: QueryDict, key: str) -> list[str]:
    seen: list[str] = []
    for value in data.getlist(key):
        label = value.strip()
        if label and label not in seen:
            seen.append(label)
    return seen


def parse_decision(data: QueryDict, proposal: Proposal) -> dict[str, Any]:
    """The keyword arguments of Proposal.decide, or DecisionError with what is wrong."""
    kind = data.get("kind", "")
    note = data.get("note", "").strip()
    if kind == Decision.Kind.ACCEPT:
        return {
            "kind": kind,
            "add_labels": list(proposal.add_labels),
            "remove_labels": list(proposal.remove_labels),
            "comment_body": proposal.comment_body,
            "close": proposal.close,
            "note": note,
        }
    if kind == Decision.Kind.REJECT:
        if not note:
            raise DecisionError("Say why the proposal is wrong: a rejection needs a reason.")
        return {
            "kind": kind,
            "add_labels": [],
            "remove_labels": [],
            "comment_body": "",
            "close": False,
            "note": note,
        }
    if kind == Decision.Kind.ESCALATE:
        if not note:
            raise DecisionError("An escalation needs a note for the triage-review meeting.")
        return {
            "kind": kind,
            "add_labels": list(proposal.add_labels),
            "remove_labels": list(proposal.remove_labels),
            "comment_body": proposal.comment_body,
            "close": False,
            "note": note,
        }
    if kind != Decision.Kind.EDIT:
        raise DecisionError("Unknown decision.")
    vocabulary = loader.load(proposal.queue.rubric).vocabulary
    add = _labels(data, "add")
    remove = _labels(data, "remove")
    for label in add:
        if label == FORBIDDEN_ALWAYS or label in vocabulary.forbidden:
            raise DecisionError(
                f"{label!r} is decided at the triage-review meeting: escalate instead."
            )
        if label not in vocabulary.allowed:
            raise DecisionError(f"{label!r} is not in the {proposal.queue.name} vocabulary.")
    current = set(proposal.issue.labels)
    for label in remove:
        if label not in current:
            raise DecisionError(f"{label!r} is not on the issue, so it cannot be removed.")
    both = set(add) & set(remove)
    if both:
        raise DecisionError(f"{sorted(both)[0]!r} cannot be both added and removed.")
    close = data.get("close") == "on"
    if close and not vocabulary.may_close:
        raise DecisionError(f"The {proposal.queue.name} queue does not close issues.")
    return {
        "kind": kind,
        "add_labels": [label for label in add if label not in current],
        "remove_labels": remove,
        "comment_body": data.get("comment", "").strip(),
        "close": close,
        "note": note,
    }
