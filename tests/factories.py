"""Test data built in code: issues in GitHub's REST shape, rows, users."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser

from triage import ingest
from triage.models import Issue, Proposal, Queue
from triage.proposing import propose
from triage.roles import oncall_group

REPO = "pytorch/pytorch"
_numbers = itertools.count(1000)
_comment_ids = itertools.count(50_000)
BASE_TIME = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

PT2_BODY = """### 🐛 Describe the bug

Compiling this graph-breaks on a dict iteration.

```python
import torch

@torch.compile
def f(x, d):
    for k, v in d.items():
        x = x + v
    return x
```

```
torch._dynamo.exc.Unsupported: call_method UserDefinedObjectVariable(items)
```
"""


def make_user(username: str, *, oncall: bool) -> AbstractUser:
    user: AbstractUser = get_user_model().objects.create_user(username=username, password="pw")
    if oncall:
        user.groups.add(oncall_group())
    return user


def raw_issue(
    number: int | None = None,
    *,
    title: str = "torch.compile graph-breaks on dict.items()",
    body: str = PT2_BODY,
    labels: tuple[str, ...] | list[str] = ("oncall: pt2",),
    comments: list[str] | None = None,
    state: str = "open",
    created: datetime | None = None,
    updated: datetime | None = None,
) -> dict[str, Any]:
    number = next(_numbers) if number is None else number
    created = created or BASE_TIME + timedelta(minutes=number % 1000)
    updated = updated or created
    return {
        "number": number,
        "title": title,
        "body": body,
        "state": state,
        "labels": [{"name": label} for label in labels],
        "user": {"login": "reporter"},
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "updated_at": updated.isoformat().replace("+00:00", "Z"),
        "html_url": f"https://github.com/{REPO}/issues/{number}",
        "comments": [
            {
                "id": next(_comment_ids),
                "user": {"login": "maintainer"},
                "body": text,
                "created_at": updated.isoformat().replace("+00:00", "Z"),
            }
            for text in comments or []
        ],
    }


def make_issue(**kwargs: Any) -> Issue:
    issue, _ = ingest.upsert(REPO, ingest.parse(raw_issue(**kwargs)))
    return issue


def queue(slug: str = "pt2") -> Queue:
    # The default queues come with the migrations.
    return Queue.objects.get(slug=slug)


def make_proposal(slug: str = "pt2", **kwargs: Any) -> Proposal:
    """An issue and its proposal, computed by the real rule engine."""
    issue = make_issue(**kwargs)
    proposal = propose(issue, queue(slug))
    assert proposal is not None, "the issue is not in the queue"
    return proposal


def ensure_default_queues() -> Queue:
    """The data migration's queues: a transactional test that ran before may have flushed them.

    Returns the pt2 queue, ready for a first sync.
    """
    from importlib import import_module

    from django.conf import settings

    defaults = import_module("triage.migrations.0002_default_queues").DEFAULT_QUEUES
    for fields in defaults:
        Queue.objects.get_or_create(
            slug=fields["slug"],
            defaults={**fields, "repository": settings.GITHUB_DEFAULT_REPOSITORY},
        )
    Queue.objects.filter(slug="pt2").update(sync_cursor=None, sync_state=Queue.SyncState.IDLE)
    return Queue.objects.get(slug="pt2")
