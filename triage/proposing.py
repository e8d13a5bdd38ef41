"""Keeping one current proposal per issue and queue, computed by workers from the queue's rubric."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from triage.models import Issue, Proposal, Queue
from triage.rubric import engine, loader


def issue_input(issue: Issue) -> engine.IssueInput:
    return engine.IssueInput(
        number=issue.number,
        title=issue.title,
        body=issue.body,
        labels=tuple(issue.labels),
        comments=tuple((int(c.get("id") or 0), str(c.get("body") or "")) for c in issue.comments),
    )


def queues_to_propose(issue: Issue) -> list[Queue]:
    """The queues this issue belongs to that need a fresh proposal; withdraws from the others.

    Called after every change to an issue. Cheap: it only compares hashes, so the caller can
    enqueue proposal tasks for exactly the queues returned.
    """
    needed: list[Queue] = []
    for queue in Queue.objects.filter(repository=issue.repository):
        if not queue.matches(issue.labels, issue.state):
            Proposal.objects.filter(
                issue=issue, queue=queue, status=Proposal.Status.PENDING
            ).update(status=Proposal.Status.WITHDRAWN)
            continue
        if is_decided(issue, queue):
            continue
        current = Proposal.objects.filter(
            issue=issue, queue=queue, status=Proposal.Status.PENDING
        ).first()
        rubric = loader.load(queue.rubric)
        if (
            current
            and current.input_hash == issue.content_hash
            and current.rubric_version == rubric.version
        ):
            continue
        needed.append(queue)
    return needed


def is_decided(issue: Issue, queue: Queue) -> bool:
    # A human decided it: never re-proposed behind their back, even if the issue changes later.
    return Proposal.objects.filter(
        issue=issue, queue=queue, status=Proposal.Status.DECIDED
    ).exists()


def propose(issue: Issue, queue: Queue) -> Proposal | None:
    """Make the issue's current proposal for the queue, superseding a stale pending one.

    Idempotent: with nothing changed it returns the existing proposal. Returns None when the
    issue is not in the queue, or a human decided it (also if that happened while we computed).
    """
    if not queue.matches(issue.labels, issue.state) or is_decided(issue, queue):
        return None
    rubric = loader.load(queue.rubric)
    current = Proposal.objects.filter(
        issue=issue, queue=queue, status=Proposal.Status.PENDING
    ).first()
    if (
        current
        and current.input_hash == issue.content_hash
        and current.rubric_version == rubric.version
    ):
        return current
    draft = engine.propose(rubric, issue_input(issue))
    try:
        with transaction.atomic():
            if current is not None:
                superseded = Proposal.objects.filter(
                    pk=current.pk, status=Proposal.Status.PENDING
                ).update(status=Proposal.Status.SUPERSEDED)
                if not superseded:
                    # Decided or replaced since we read it.
                    return None
            proposal = Proposal.from_draft(issue, queue, draft)
            proposal.save()
    except IntegrityError:
        # Another worker created the pending proposal first: theirs stands.
        return None
    return proposal
