"""The history sync: a queue's closed and triaged issues, read with their final labels.

Such an issue is a labelled example (`Issue.labelled_at` set): what oncalls actually did. The
learned proposer trains on them and the similar-issue index compares new issues with them.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from triage import github, ingest
from triage.models import Issue, Queue
from triage.rubric import loader

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

log = logging.getLogger(__name__)

# Store (and show progress) a page of GitHub's listing at a time.
PAGE = 100


def triaged_labels(queue: Queue) -> frozenset[str]:
    """The labels that say an open issue of this queue is triaged: what its rubric adds when
    triage is done. Empty when the rubric does not say."""
    completion = loader.load(queue.rubric).completion
    return frozenset(completion.add) if completion is not None else frozenset()


def is_labelled(labels: list[str], state: str, triaged: frozenset[str]) -> bool:
    """Whether an issue's labels are final: it is closed, or open and marked triaged."""
    return state == "closed" or bool(triaged & set(labels))


def sync_history(
    queue: Queue, on_changed: Callable[[Issue], None], since: datetime | None = None
) -> int:
    """Read the queue's issues updated since its history cursor (or `since`); returns how many.

    Every state is listed, so that an issue reopened since stops being a labelled example. The
    listing asks only for the labels the queue requires: the labels a queue excludes are the
    very ones its triage adds, and a finished issue carries them. Comments are not read: a
    labelled example is its title, body and final labels.
    """
    if since is None:
        since = queue.history_cursor or timezone.now() - timedelta(
            days=settings.TRIAGE_HISTORY_FIRST_DAYS
        )
    triaged = triaged_labels(queue)
    cursor = queue.history_cursor
    seen = 0
    page: dict[int, ingest.IssueFields] = {}
    skipped: list[str] = []

    def store_page() -> None:
        if not page:
            return
        now = timezone.now()
        with transaction.atomic():
            stored = ingest.upsert_many(queue.repository, list(page.values()))
            labelled = [
                issue.pk
                for issue, _, _ in stored
                if is_labelled(issue.labels, issue.state, triaged)
            ]
            Issue.objects.filter(pk__in=labelled).update(labelled_at=now)
            Issue.objects.filter(pk__in=[issue.pk for issue, _, _ in stored]).exclude(
                pk__in=labelled
            ).update(labelled_at=None)
            for issue, _, changed in stored:
                if changed:
                    on_changed(issue)
        page.clear()

    for raw, _ in github.iter_issues(
        queue.repository, labels=list(queue.require_labels), since=since, state="all"
    ):
        try:
            fields = ingest.parse(raw)
        except ingest.IssueFormatError as exc:
            skipped.append(f"#{_number(raw)}: {exc}"[:300])
            log.warning("history sync of %s skipped an issue: %s", queue, skipped[-1])
            continue
        page[fields.number] = fields
        if cursor is None or fields.updated_at > cursor:
            cursor = fields.updated_at
        seen += 1
        if len(page) == PAGE:
            store_page()
            Queue.objects.filter(pk=queue.pk).update(history_seen=seen)
    store_page()
    queue.history_cursor = cursor
    Queue.objects.filter(pk=queue.pk).update(
        history_cursor=cursor,
        history_seen=seen,
        history_state=Queue.SyncState.IDLE,
        history_finished_at=timezone.now(),
        history_error=(
            f"Skipped {len(skipped)} issue(s) that could not be stored: " + "; ".join(skipped[:5])
            if skipped
            else ""
        ),
    )
    return seen


def _number(raw: Any) -> object:
    return raw.get("number", "?") if isinstance(raw, dict) else "?"
