"""The outbox: every change an approval sends to GitHub, from its creation to its settlement.

An approval (an oncall's decision, a meeting's outcome) and its write are committed together;
the table is the queue. A task sends a write: it claims the row with a token, applies the
change to GitHub exactly once and never over a human's newer change, and settles the row only
while it still holds the claim. Beat re-sends a write whose message was lost (the broker was
down, a worker died) and takes over one whose claim lease ran out.

This module returns rows; views and tasks dispatch the work.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from triage import github
from triage.models import AgendaItem, Decision, Issue, Proposal, Write

if TYPE_CHECKING:
    from datetime import datetime

    from triage.models import Change

log = logging.getLogger(__name__)


def resend_after() -> timedelta:
    """A queued write whose message should have run by now is sent again after this long."""
    return timedelta(seconds=settings.TRIAGE_RESEND_AFTER_SECONDS)


def lease() -> timedelta:
    """How long a claim holds: past it, another worker may take the write over."""
    return timedelta(seconds=settings.TRIAGE_WRITE_LEASE_SECONDS)


# ----------------------------------------------------------------------------- creating


def decide(proposal: Proposal, **fields: Any) -> Decision | None:
    """A human decision and its write, committed together; None if the proposal was decided
    meanwhile. The caller sends the write once committed."""
    with transaction.atomic():
        decision = proposal.decide(**fields)
        if decision is not None:
            for_decision(decision)
    return decision


def accept_all(proposals: list[Proposal], user: Any) -> list[Decision]:
    """Accept each proposal as proposed: a decision and a write each, as if one by one. A
    proposal decided meanwhile is left out. The caller sends the writes once committed."""
    made = []
    for proposal in proposals:
        decision = decide(
            proposal,
            kind=Decision.Kind.ACCEPT,
            user=user,
            add_labels=list(proposal.add_labels),
            remove_labels=list(proposal.remove_labels),
            comment_body=proposal.comment_body,
            close=proposal.close,
            note="",
        )
        if decision is not None:
            made.append(decision)
    return made


def _due() -> datetime:
    # The grace period in which the approval can still be undone.
    return timezone.now() + timedelta(seconds=settings.TRIAGE_UNDO_SECONDS)


def for_decision(decision: Decision) -> Write | None:
    """The write of a decision, in the caller's transaction; a rejection writes nothing."""
    if decision.kind == Decision.Kind.REJECT:
        return None
    return Write.objects.create(decision=decision, due_at=_due())


def for_outcome(item: AgendaItem) -> Write:
    """The write of a meeting outcome, in the caller's transaction.

    Only a conflict puts a decided item back to open: the write it left wrote nothing, and an
    item has one write, so that write carries the new outcome.
    """
    write = Write.objects.filter(outcome=item).first()
    if write is None:
        return Write.objects.create(outcome=item, due_at=_due())
    now = timezone.now()
    Write.objects.filter(pk=write.pk).update(
        state=Write.State.QUEUED,
        attempts=0,
        claimed_at=None,
        claim_token=None,
        due_at=_due(),
        last_error="",
        sent={},
        applied_at=None,
        created_at=now,
    )
    write.refresh_from_db()
    return write


def undo(write: Write) -> bool:
    """Withdraw a write still in its grace period: nothing is sent, and the approval's item is
    open again (the proposal back in the inbox as it was, or the agenda item undecided)."""
    with transaction.atomic():
        withdrawn = Write.objects.filter(
            pk=write.pk, state=Write.State.QUEUED, attempts=0, due_at__gt=timezone.now()
        ).update(state=Write.State.WITHDRAWN, last_error="Undone before it was sent.")
        if not withdrawn:
            return False
        if write.decision_id is not None:
            Proposal.objects.filter(
                decisions__pk=write.decision_id, status=Proposal.Status.DECIDED
            ).update(status=Proposal.Status.PENDING)
        if write.outcome_id is not None:
            AgendaItem.objects.filter(pk=write.outcome_id).update(status=AgendaItem.Status.OPEN)
    return True


def requeue(write: Write) -> bool:
    """Put a failed write back in the queue (its Retry button)."""
    requeued = Write.objects.filter(pk=write.pk, state=Write.State.FAILED).update(
        state=Write.State.QUEUED, last_error="", due_at=timezone.now()
    )
    return requeued == 1


def due_for_resend(now: datetime | None = None) -> list[int]:
    """Writes whose message seems lost: queued past their due time, or held past the lease."""
    now = now or timezone.now()
    return list(
        Write.objects.filter(
            Q(state=Write.State.QUEUED, due_at__lt=now - resend_after())
            | Q(state=Write.State.RUNNING, claimed_at__lt=now - lease())
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


# ----------------------------------------------------------------------------- claiming


def claim(write_id: int) -> Write | None:
    """Take a write for one attempt: None if it is settled or another worker holds it.

    A claim whose lease ran out may be taken over (its worker died); the new token makes the
    old worker's late answer harmless.
    """
    now = timezone.now()
    token = uuid.uuid4()
    claimed = (
        Write.objects.filter(pk=write_id)
        .filter(
            Q(state=Write.State.QUEUED, due_at__lte=now)
            | Q(state=Write.State.RUNNING, claimed_at__lt=now - lease())
        )
        .update(
            state=Write.State.RUNNING,
            claimed_at=now,
            claim_token=token,
            attempts=models.F("attempts") + 1,
        )
    )
    if not claimed:
        return None
    return (
        Write.objects.select_related("decision__proposal__issue", "outcome__issue")
        .filter(pk=write_id)
        .first()
    )


def _settle(write: Write, **fields: Any) -> bool:
    """Update the row only while this worker still holds its claim."""
    held = Write.objects.filter(
        pk=write.pk, state=Write.State.RUNNING, claim_token=write.claim_token
    ).update(**fields)
    if not held:
        log.warning(
            "write %s: the claim was taken over; this attempt's result is dropped", write.pk
        )
    return held == 1


def postpone(write: Write, reason: str, retry_after: float) -> bool:
    """Back to the queue until `retry_after` seconds from now (a rate limit, a 5xx)."""
    return _settle(
        write,
        state=Write.State.QUEUED,
        claim_token=None,
        due_at=timezone.now() + timedelta(seconds=retry_after),
        last_error=f"{reason} (retrying in {retry_after:.0f} s)",
    )


def give_up(write: Write, reason: str) -> bool:
    return _settle(write, state=Write.State.FAILED, claim_token=None, last_error=reason)


# ----------------------------------------------------------------------------- applying


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


def apply(write: Write) -> Issue | None:
    """One attempt. Raises RetryableGitHubError / PermanentGitHubError for the task to sort.

    What each step sent is recorded as it goes, so a retry knows what it already did: a label
    this write added that is gone now was removed by a human, and is not added again. Returns
    the issue when its stored labels were brought up to date (the caller proposes again).
    """
    change = write.change()
    issue = change.issue
    attempt = write.attempts
    earlier: dict[str, Any] = dict(write.sent or {})

    live = github.fetch_issue(issue.repository, issue.number, attempt)
    with github.translated_errors(attempt):
        live_labels = github.label_names(live)
        live_state = live.state
    clashing = drift(change, live_labels, attempt)
    if clashing:
        return record_conflict(write, issue, live_labels, clashing)

    withdrawn = sorted(set(earlier.get("added", [])) - set(live_labels))
    to_add = [label for label in change.add if label not in live_labels and label not in withdrawn]
    to_remove = [label for label in change.remove if label in live_labels]
    sent: dict[str, Any] = {
        "added": list(earlier.get("added", [])),
        "removed": list(earlier.get("removed", [])),
        "comment_id": earlier.get("comment_id"),
        "closed": bool(earlier.get("closed", False)),
    }
    if withdrawn:
        sent["withdrawn_on_github"] = withdrawn
    if change.comment and sent["comment_id"] is None:
        # A retry after a post whose answer was lost must find that post, not write another.
        comment_id = github.find_comment(live, change.marker, attempt)
        if comment_id is None:
            body = f"{change.comment.rstrip()}\n\n{change.marker}"
            comment_id = github.post_comment(live, body, attempt)
        sent["comment_id"] = comment_id
        _record_progress(write, sent)
    if to_add:
        github.add_labels(live, to_add, attempt)
        sent["added"] = [*sent["added"], *(label for label in to_add if label not in sent["added"])]
        _record_progress(write, sent)
    for label in to_remove:
        github.remove_label(live, label, attempt)
        if label not in sent["removed"]:
            sent["removed"].append(label)
    if change.close and live_state == "open":
        github.close(live, attempt)
        sent["closed"] = True

    final_labels = sorted((set(live_labels) | set(to_add)) - set(to_remove))
    with transaction.atomic():
        settled = _settle(
            write,
            state=Write.State.APPLIED,
            claim_token=None,
            sent=sent,
            applied_at=timezone.now(),
            last_error="",
        )
        if not settled:
            return None
        refresh_local_labels(issue, final_labels, "closed" if sent["closed"] else live_state)
    return issue


def _record_progress(write: Write, sent: dict[str, Any]) -> None:
    Write.objects.filter(pk=write.pk, claim_token=write.claim_token).update(sent=dict(sent))


def record_conflict(
    write: Write, issue: Issue, live_labels: list[str], clashing: set[str]
) -> Issue | None:
    names = ", ".join(sorted(clashing))
    message = f"Changed on GitHub since it was approved: {names}. Nothing was written."
    log.info("write %s conflicts on %s: %s", write.pk, issue, names)
    with transaction.atomic():
        if not _settle(write, state=Write.State.CONFLICT, claim_token=None, last_error=message):
            return None
        # Back to whoever approved it: the approval stands in the history, the item is open again.
        decision = write.decision
        if decision is not None:
            Proposal.objects.filter(pk=decision.proposal_id, status=Proposal.Status.DECIDED).update(
                status=Proposal.Status.PENDING
            )
        if write.outcome_id is not None:
            AgendaItem.objects.filter(pk=write.outcome_id).update(status=AgendaItem.Status.OPEN)
        refresh_local_labels(issue, live_labels, issue.state)
    return issue


def refresh_local_labels(issue: Issue, labels: list[str], state: str) -> None:
    Issue.objects.filter(pk=issue.pk).update(labels=sorted(labels), state=state)
    issue.refresh_from_db()
