from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from tests.factories import REPO, make_proposal, make_user, raw_issue
from triage import outbox
from triage.history.examples import labelled
from triage.models import Issue, Queue

pytestmark = pytest.mark.django_db


def ago(days: float):
    return timezone.now().replace(microsecond=0) - timedelta(days=days)


def history(capture, *args: str) -> Queue:
    with capture(execute=True):
        call_command("sync_history", "--queue", "pt2", *args)
    return Queue.objects.get(slug="pt2")


def labelled_numbers() -> set[int]:
    return set(Issue.objects.filter(labelled_at__isnull=False).values_list("number", flat=True))


def listing(standin):
    return [r for r in standin.requests if r.path == f"/repos/{REPO}/issues"]


def test_history_sync_reads_closed_and_triaged_issues_incrementally(
    standin, django_capture_on_commit_callbacks
):
    done = ["oncall: pt2", "module: dynamo", "triaged"]
    standin.add_issue(REPO, raw_issue(1, labels=done, state="closed", created=ago(9)))
    standin.add_issue(REPO, raw_issue(2, labels=done, created=ago(8)))  # open, triaged
    standin.add_issue(REPO, raw_issue(3, created=ago(7)))  # open, waiting for triage
    standin.add_issue(REPO, raw_issue(4, labels=["oncall: distributed"], state="closed"))

    queue = history(django_capture_on_commit_callbacks)

    assert queue.history_state == Queue.SyncState.IDLE
    assert queue.history_seen == 3  # 4 is not the queue's: GitHub filtered it out
    assert labelled_numbers() == {1, 2}
    assert Issue.objects.get(number=1).labels == sorted(done)
    first = listing(standin)[0]
    assert first.query["state"] == "all"
    assert first.query["labels"] == "oncall: pt2"
    cursor = queue.history_cursor
    assert cursor is not None
    assert cursor == Issue.objects.get(number=3).updated_at
    # The untriaged open issue it stored is proposed, as the queue's sync would have.
    assert Issue.objects.get(number=3).proposals.filter(queue=queue).exists()

    # #3 is triaged and closed, #1 reopened without its labels; #2 does not change.
    standin.edit_issue(REPO, 3, state="closed", labels=done)
    standin.edit_issue(REPO, 1, state="open", labels=["oncall: pt2"])
    standin.reset_log()
    queue = history(django_capture_on_commit_callbacks)

    assert listing(standin)[0].query["since"] == cursor.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert queue.history_seen == 2
    assert labelled_numbers() == {2, 3}
    assert queue.history_cursor is not None
    assert queue.history_cursor > cursor
    assert queue.sync_cursor is None  # the open-issue sync's own cursor is left alone


def test_the_first_history_sync_looks_back_a_year_unless_told_since(
    standin, django_capture_on_commit_callbacks, settings
):
    settings.TRIAGE_HISTORY_FIRST_DAYS = 365
    old = ["oncall: pt2", "triaged"]
    standin.add_issue(REPO, raw_issue(1, labels=old, state="closed", created=ago(500)))
    standin.add_issue(REPO, raw_issue(2, labels=old, state="closed", created=ago(30)))

    history(django_capture_on_commit_callbacks)
    assert labelled_numbers() == {2}

    history(django_capture_on_commit_callbacks, "--since", ago(600).date().isoformat())
    assert labelled_numbers() == {1, 2}
    with pytest.raises(CommandError, match="--since must be a date"):
        call_command("sync_history", "--queue", "pt2", "--since", "last week")


def test_history_progress_shows_where_the_sync_shows(
    standin, django_capture_on_commit_callbacks, client, oncall
):
    standin.add_issue(REPO, raw_issue(1, labels=["oncall: pt2", "triaged"], state="closed"))
    history(django_capture_on_commit_callbacks)
    client.force_login(oncall)

    page = client.get(reverse("sync-status", args=["pt2"])).content.decode()
    assert "History: 1 past issues read" in page

    Queue.objects.filter(slug="pt2").update(history_state="running", history_seen=300)
    page = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert "History: 300 past issues read…" in page


def test_a_history_sync_github_refuses_is_reported(standin, django_capture_on_commit_callbacks):
    standin.inject("GET", f"/repos/{REPO}/issues", status=404, times=5)
    queue = history(django_capture_on_commit_callbacks)
    assert queue.history_state == Queue.SyncState.FAILED
    assert "404" in queue.history_error


def test_import_labelled_stores_closed_and_triaged_issues_as_examples(
    tmp_path, capsys, django_capture_on_commit_callbacks
):
    rows = [
        raw_issue(1, labels=["oncall: pt2", "module: inductor"], state="closed"),
        raw_issue(2, labels=["oncall: pt2", "triaged", "module: dynamo"]),
        raw_issue(3, labels=["oncall: pt2"]),
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    with django_capture_on_commit_callbacks(execute=True):
        call_command("import_issues", "--labelled", str(path))

    assert "3 new, 0 updated, 0 unchanged; 2 labelled examples" in capsys.readouterr().out
    assert labelled_numbers() == {1, 2}
    with pytest.raises(CommandError, match="give one file"):
        call_command("import_issues", str(path), "--labelled", str(path))


def test_approved_decisions_are_labelled_examples_too(standin):
    user = make_user("oncall-ex", oncall=True)
    accepted = make_proposal(number=11)
    rejected = make_proposal(number=12)
    history_issue = make_proposal(number=13).issue
    Issue.objects.filter(pk=history_issue.pk).update(
        labelled_at=timezone.now(), labels=["oncall: pt2", "module: dynamo", "triaged"]
    )
    fields = {"add_labels": ["module: inductor"], "remove_labels": [], "comment_body": ""}
    outbox.decide(accepted, user=user, kind="edit", close=False, note="", **fields)
    outbox.decide(rejected, user=user, kind="reject", close=False, note="wrong", **fields)

    examples = {example.number: example for example in labelled(REPO)}

    assert set(examples) == {11, 13}
    assert examples[11].source == "decision"
    assert examples[11].labels == ["module: inductor", "oncall: pt2"]
    assert examples[13].source == "history"
    assert "triaged" in examples[13].labels
