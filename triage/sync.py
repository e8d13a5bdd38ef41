"""Incremental sync of a queue's issues from GitHub."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from triage import github, ingest
from triage.models import Queue

# Store progress every this many issues, so the console can show it without a write per issue.
PROGRESS_EVERY = 10


def sync_queue(queue: Queue) -> int:
    """Fetch what changed since the queue's cursor; returns how many issues were read.

    The first sync reads the open issues of the last TRIAGE_FIRST_SYNC_DAYS; later ones read
    every state, so that closed or relabelled issues leave the inbox.
    """
    from triage.proposing import queues_to_propose
    from triage.tasks import propose_issue

    if queue.sync_cursor is None:
        since = timezone.now() - timedelta(days=settings.TRIAGE_FIRST_SYNC_DAYS)
        state = "open"
    else:
        since, state = queue.sync_cursor, "all"
    seen = 0
    for raw, comments in github.iter_issues(
        queue.repository, labels=list(queue.require_labels), since=since, state=state
    ):
        fields = ingest.parse(raw, comments)
        with transaction.atomic():
            issue, changed = ingest.upsert(queue.repository, fields)
            if changed:
                for target in queues_to_propose(issue):
                    propose_issue.delay_on_commit(issue.pk, target.pk)
            # The cursor only moves forward, after the issue is stored: an interrupted sync resumes.
            if queue.sync_cursor is None or fields.updated_at > queue.sync_cursor:
                queue.sync_cursor = fields.updated_at
            seen += 1
            if seen % PROGRESS_EVERY == 0:
                Queue.objects.filter(pk=queue.pk).update(
                    sync_cursor=queue.sync_cursor, sync_seen=seen
                )
    Queue.objects.filter(pk=queue.pk).update(
        sync_cursor=queue.sync_cursor,
        sync_seen=seen,
        sync_state=Queue.SyncState.IDLE,
        sync_finished_at=timezone.now(),
        sync_error="",
    )
    return seen
