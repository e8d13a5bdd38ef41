"""Applying an approved decision to GitHub: exactly once, never over a human's newer change."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from triage import github
from triage.models import AgendaItem, Change, Issue, Proposal, Write

log = logging.getLogger(__name__)


def drift(change: Change, live_labels: list[str], attempt: int) -> set[str]:
    """Labels changed on GitHub since the approver looked that this change also touches."""
    live = set(live_labels)
    touched = set(change.add) | set(change.remove)
    clashing = (set(change.baseline) ^ live) & touched
    if attempt > 1:
        # An earlier attempt may have got part-way, or lost GitHub's answer after it acted: a
        # label already as this change wants it is most likely its own doing, and either way
        # the approved end state holds.
        clashing -= set(change.add) & live
        clashing -= set(change.remove) - live
    return clashing


def apply(write: Write) -> None:
    """One attempt. Raises RetryableGitHubError / PermanentGitHubError for the task to sort."""
    change = write.change()
    issue = change.issue
    attempt = write.attempts

    live = github.fetch_issue(issue.repository, issue.number, attempt)
    with github.translated_errors(attempt):
        live_labels = github.label_names(live)
        live_state = live.state
    clashing = drift(change, live_labels, attempt)
    if clashing:
        record_conflict(write, issue, live_labels, clashing)
        return

    to_add = [label for label in change.add if label not in live_labels]
    to_remove = [label for label in change.remove if label in live_labels]
    sent: dict[str, object] = {"added": [], "removed": [], "comment_id": None, "closed": False}
    if change.comment:
        # A retry after a post whose answer was lost must find that post, not write another.
        comment_id = github.find_comment(live, change.marker, attempt)
        if comment_id is None:
            body = f"{change.comment.rstrip()}\n\n{change.marker}"
            comment_id = github.post_comment(live, body, attempt)
        sent["comment_id"] = comment_id
    if to_add:
        github.add_labels(live, to_add, attempt)
        sent["added"] = to_add
    for label in to_remove:
        github.remove_label(live, label, attempt)
    sent["removed"] = to_remove
    if change.close and live_state == "open":
        github.close(live, attempt)
        sent["closed"] = True

    final_labels = sorted((set(live_labels) | set(to_add)) - set(to_remove))
    with transaction.atomic():
        Write.objects.filter(pk=write.pk).update(
            state=Write.State.APPLIED, sent=sent, applied_at=timezone.now(), last_error=""
        )
        refresh_local_labels(issue, final_labels, "closed" if sent["closed"] else live_state)


def record_conflict(write: Write, issue: Issue, live_labels: list[str], clashing: set[str]) -> None:
    names = ", ".join(sorted(clashing))
    message = f"Changed on GitHub since it was approved: {names}. Nothing was written."
    log.info("write %s conflicts on %s: %s", write.pk, issue, names)
    with transaction.atomic():
        Write.objects.filter(pk=write.pk).update(state=Write.State.CONFLICT, last_error=message)
        # Back to whoever approved it: the approval stands in the history, the item is open again.
        decision = write.decision
        if decision is not None:
            Proposal.objects.filter(pk=decision.proposal_id, status=Proposal.Status.DECIDED).update(
                status=Proposal.Status.PENDING
            )
        if write.outcome_id is not None:
            AgendaItem.objects.filter(pk=write.outcome_id).update(status=AgendaItem.Status.OPEN)
        refresh_local_labels(issue, live_labels, issue.state)


def refresh_local_labels(issue: Issue, labels: list[str], state: str) -> None:
    from triage.proposing import enqueue, queues_to_propose

    Issue.objects.filter(pk=issue.pk).update(labels=sorted(labels), state=state)
    issue.refresh_from_db()
    for queue in queues_to_propose(issue):
        enqueue(queue, [issue.pk])


def fail(write: Write, reason: str) -> None:
    Write.objects.filter(pk=write.pk).update(state=Write.State.FAILED, last_error=reason)
