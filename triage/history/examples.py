"""Every labelled example of a repository, wherever its final labels come from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from triage.models import Decision, Issue, Write

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True)
class Example:
    issue_id: int
    number: int
    labels: list[str]
    # "history": the labels GitHub had when the history sync (or a labelled import) read it;
    # "decision": the labels a decision approved here wrote.
    source: str


APPROVALS = (Decision.Kind.ACCEPT, Decision.Kind.EDIT, Decision.Kind.ESCALATE)


def labelled(repository: str) -> Iterator[Example]:
    """The history's examples, then the issues whose only final labels are a decision's (the
    last approval of each issue, unless its write was undone or conflicted)."""
    seen: set[int] = set()
    history = (
        Issue.objects.filter(repository=repository, labelled_at__isnull=False)
        .only("pk", "number", "labels")
        .order_by("number")
    )
    for issue in history.iterator(chunk_size=2000):
        seen.add(issue.pk)
        yield Example(issue.pk, issue.number, sorted(issue.labels), "history")
    approvals = (
        Decision.objects.filter(proposal__issue__repository=repository, kind__in=APPROVALS)
        # An undone write left the labels as they were; a conflicting one left them to a human.
        .exclude(write__state__in=[Write.State.WITHDRAWN, Write.State.CONFLICT])
        .select_related("proposal__issue")
        .only(
            "add_labels",
            "remove_labels",
            "proposal__labels_seen",
            "proposal__issue__number",
        )
        .order_by("-decided_at")
    )
    for decision in approvals.iterator(chunk_size=2000):
        issue_id = decision.proposal.issue_id
        if issue_id in seen:
            continue
        seen.add(issue_id)
        labels = (set(decision.proposal.labels_seen) - set(decision.remove_labels)) | set(
            decision.add_labels
        )
        yield Example(issue_id, decision.proposal.issue.number, sorted(labels), "decision")
