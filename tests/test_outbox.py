from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.factories import REPO, make_user, raw_issue
from triage import outbox
from triage.github import PermanentGitHubError, RetryableGitHubError
from triage.models import Decision, Proposal, Write
from triage.proposing import propose
from triage.tasks import apply_write, resend_stale_writes

pytestmark = pytest.mark.django_db

CRASH_BODY = """Segmentation fault (core dumped) when compiling.

```python
import torch
torch.compile(lambda x: x.sin())(torch.randn(3))
```
"""


def decided(standin, *, kind="accept", body=CRASH_BODY, labels=("oncall: pt2",), **decision):
    """An issue on the stand-in and in the console, proposed and decided, its write queued."""
    raw = raw_issue(title="Segfault when compiling sin", body=body, labels=labels)
    standin.add_issue(REPO, raw)
    from triage import ingest
    from triage.models import Queue

    issue, _ = ingest.upsert(REPO, ingest.parse(raw))
    proposal = propose(issue, Queue.objects.get(slug="pt2"))
    assert proposal is not None
    fields: dict[str, Any] = {
        "add_labels": list(proposal.add_labels),
        "remove_labels": list(proposal.remove_labels),
        "comment_body": proposal.comment_body,
        "close": False,
        "note": "",
    } | decision
    user = make_user(f"oncall-{raw['number']}", oncall=True)
    made = outbox.decide(proposal, kind=kind, user=user, **fields)
    assert made is not None
    return raw["number"], made.write


def claimed(write: Write) -> Write:
    taken = outbox.claim(write.pk)
    assert taken is not None, "the write could not be claimed"
    return taken


def test_accepted_labels_and_comment_are_applied_once(standin):
    number, write = decided(standin, comment_body="Could you share a reproducer?")
    write = claimed(write)
    outbox.apply(write)

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert "triage review" in standin.label_names(REPO, number)
    comments = standin.comments(REPO, number)
    assert len(comments) == 1
    assert write.decision is not None
    assert write.decision.comment_marker in comments[0]["body"]
    assert write.sent["added"] == ["triage review"]
    assert write.sent["comment_id"] == comments[0]["id"]
    # Running the task again for a settled write does nothing at all.
    standin.reset_log()
    apply_write.delay(write.pk)
    assert standin.requests == []


def test_retry_after_lost_answer_posts_no_second_comment(standin):
    number, write = decided(standin, comment_body="Please share a reproducer.")
    # The comment reaches GitHub but the label call after it fails: the task will run again.
    standin.inject("POST", r"/labels$", 502)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError):
        outbox.apply(write)
    assert len(standin.comments(REPO, number)) == 1

    Write.objects.filter(pk=write.pk).update(state=Write.State.QUEUED)
    write.refresh_from_db()
    write = claimed(write)
    outbox.apply(write)

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert len(standin.comments(REPO, number)) == 1
    assert "triage review" in standin.label_names(REPO, number)


def test_human_drift_on_a_touched_label_is_a_conflict_and_writes_nothing(
    standin, django_capture_on_commit_callbacks
):
    number, write = decided(standin)
    # Meanwhile a human labels the issue on GitHub with the very label the decision adds.
    standin.set_labels(REPO, number, ["oncall: pt2", "triage review", "high priority"])
    standin.reset_log()
    with django_capture_on_commit_callbacks(execute=True):
        apply_write.delay(write.pk)

    write.refresh_from_db()
    assert write.state == Write.State.CONFLICT
    assert "triage review" in write.last_error
    assert standin.writes() == []
    assert write.decision is not None
    proposal = write.decision.proposal
    proposal.refresh_from_db()
    assert proposal.status != Proposal.Status.DECIDED
    proposal.issue.refresh_from_db()
    # The console now knows what GitHub has, and a fresh proposal replaces the conflicted one.
    assert "high priority" in proposal.issue.labels
    assert proposal.status == Proposal.Status.SUPERSEDED
    fresh = Proposal.objects.get(issue=proposal.issue, status=Proposal.Status.PENDING)
    assert "triage review" not in fresh.add_labels


def test_a_retry_after_a_partial_write_is_not_a_conflict_with_itself(standin):
    number, write = decided(
        standin,
        kind="edit",
        labels=("oncall: pt2", "module: docs"),
        add_labels=["module: inductor"],
        remove_labels=["module: docs"],
        comment_body="",
    )
    # The labels are added, then removing one fails: the task will run the write again.
    standin.inject("DELETE", r"/labels/", 502)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError):
        outbox.apply(write)
    assert "module: inductor" in standin.label_names(REPO, number)

    Write.objects.filter(pk=write.pk).update(state=Write.State.QUEUED)
    write.refresh_from_db()
    write = claimed(write)
    outbox.apply(write)

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert set(standin.label_names(REPO, number)) == {"oncall: pt2", "module: inductor"}
    assert write.decision is not None
    assert write.decision.proposal.status == Proposal.Status.DECIDED


def test_drift_on_other_labels_does_not_block_the_write(standin):
    number, write = decided(standin)
    standin.set_labels(REPO, number, ["oncall: pt2", "module: docs"])
    write = claimed(write)
    outbox.apply(write)

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert set(standin.label_names(REPO, number)) == {
        "oncall: pt2",
        "module: docs",
        "triage review",
    }


def test_removes_only_approved_labels_still_present(standin):
    number, write = decided(
        standin,
        kind="edit",
        labels=("oncall: pt2", "module: docs"),
        add_labels=[],
        remove_labels=["module: docs"],
        comment_body="",
    )
    write = claimed(write)
    outbox.apply(write)
    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert standin.label_names(REPO, number) == ["oncall: pt2"]
    assert write.sent["removed"] == ["module: docs"]


def test_server_error_then_success(standin):
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 503)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError) as failure:
        outbox.apply(write)
    assert failure.value.retry_after > 0

    Write.objects.filter(pk=write.pk).update(state=Write.State.QUEUED)
    write.refresh_from_db()
    write = claimed(write)
    outbox.apply(write)
    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert "triage review" in standin.label_names(REPO, number)


def test_rate_limit_honours_retry_after(standin):
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 403, retry_after=42)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError) as failure:
        outbox.apply(write)
    assert failure.value.retry_after == 42


def test_rate_limit_honours_the_reset_header(standin):
    import time

    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 403, rate_limit_reset=int(time.time()) + 120)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError) as failure:
        outbox.apply(write)
    assert 100 <= failure.value.retry_after <= 122


def due_now(write: Write) -> None:
    Write.objects.filter(pk=write.pk).update(due_at=timezone.now())


def test_task_retries_a_rate_limit_after_retry_after(standin, caplog):
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 429, retry_after=30, times=1)
    apply_write.delay(write.pk)
    assert "retry in 30 s" in caplog.text
    write.refresh_from_db()
    assert write.state == Write.State.QUEUED
    assert 25 < (write.due_at - timezone.now()).total_seconds() <= 30
    assert outbox.claim(write.pk) is None  # not before its time

    due_now(write)
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert write.attempts == 2


def test_task_gives_up_after_the_attempt_limit(standin, settings):
    settings.TRIAGE_WRITE_MAX_ATTEMPTS = 2
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 502, times=5)
    apply_write.delay(write.pk)
    due_now(write)
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.state == Write.State.FAILED
    assert write.attempts == 2
    assert "Gave up after 2 attempts" in write.last_error


def test_permanent_404_fails_at_once_with_the_reason(standin):
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 404, times=5)
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.state == Write.State.FAILED
    assert "404" in write.last_error
    assert write.attempts == 1
    assert standin.writes() == []


def test_permanent_error_class_for_422():
    from github import GithubException

    from triage.github import classify

    error = classify(GithubException(422, {"message": "Validation Failed"}, {}))
    assert isinstance(error, PermanentGitHubError)
    assert error.status == 422


def test_failed_write_can_be_retried(standin):
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 404)
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.state == Write.State.FAILED
    assert outbox.requeue(write)
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.state == Write.State.APPLIED


def test_rejection_writes_nothing(standin):
    raw = raw_issue(title="Segfault when compiling sin", body=CRASH_BODY)
    standin.add_issue(REPO, raw)
    from triage import ingest
    from triage.models import Queue

    issue, _ = ingest.upsert(REPO, ingest.parse(raw))
    proposal = propose(issue, Queue.objects.get(slug="pt2"))
    assert proposal is not None
    standin.reset_log()
    decision = outbox.decide(
        proposal,
        kind=Decision.Kind.REJECT,
        user=make_user("rejecter", oncall=True),
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="not a crash, the reporter's driver is broken",
    )
    assert decision is not None
    assert not Write.objects.filter(decision=decision).exists()
    assert standin.writes() == []


def test_a_marker_in_someone_elses_comment_does_not_stop_the_consoles_comment(standin):
    number, write = decided(standin, comment_body="Could you share a reproducer?")
    # Anyone may comment; a comment carrying the console's marker is not the console's post.
    standin.add_comment(REPO, number, f"nothing to see {write.decision.comment_marker}")
    write = claimed(write)
    outbox.apply(write)

    comments = standin.comments(REPO, number)
    assert [c["user"]["login"] for c in comments] == ["octocat", standin.bot_login]
    write.refresh_from_db()
    assert write.sent["comment_id"] == comments[1]["id"]


def test_the_marker_cannot_be_written_ahead_of_time(settings):
    from triage.models import comment_marker

    # Ids are sequential; the marker is keyed with the secret key, so knowing the next id is
    # not enough to write its marker.
    mine = comment_marker("decision", 41)
    assert mine != comment_marker("decision", 42) != comment_marker("outcome", 41)
    settings.SECRET_KEY = "another deployment's key"
    assert comment_marker("decision", 41) != mine


# ----------------------------------------------------------------------------- the table is the queue


def age(write: Write, *, due: timedelta | None = None, claimed: timedelta | None = None) -> None:
    """Move a write's clock back, as if its message had been lost that long ago."""
    now = timezone.now()
    fields: dict[str, Any] = {}
    if due is not None:
        fields["due_at"] = now - due
    if claimed is not None:
        fields["claimed_at"] = now - claimed
    Write.objects.filter(pk=write.pk).update(**fields)


def test_a_queued_write_whose_message_was_lost_is_sent_again_by_beat(standin):
    number, write = decided(standin)
    # Nothing sent it: the broker was down when the decision was committed.
    assert outbox.due_for_resend() == []
    age(write, due=outbox.resend_after() + timedelta(seconds=5))
    assert outbox.due_for_resend() == [write.pk]

    resend_stale_writes.delay()

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert "triage review" in standin.label_names(REPO, number)


def test_a_write_postponed_for_a_rate_limit_is_not_resent_before_its_time(standin):
    number, write = decided(standin)
    standin.inject("GET", rf"/issues/{number}$", 403, retry_after=600)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError) as failure:
        outbox.apply(write)
    assert outbox.postpone(write, str(failure.value), failure.value.retry_after)
    write.refresh_from_db()
    assert write.state == Write.State.QUEUED
    assert outbox.due_for_resend(timezone.now() + timedelta(minutes=2)) == []
    assert outbox.due_for_resend(timezone.now() + timedelta(minutes=12)) == [write.pk]


def test_a_write_left_running_by_a_dead_worker_is_taken_over_and_posts_once(standin):
    number, write = decided(standin, comment_body="Could you share a reproducer?")
    # The worker posted the comment, then was killed before it added the labels.
    write = claimed(write)
    standin.inject("POST", r"/labels$", 502)
    with pytest.raises(RetryableGitHubError):
        outbox.apply(write)
    # kill -9: nothing settled the row, it stays running with the dead worker's claim.
    assert Write.objects.get(pk=write.pk).state == Write.State.RUNNING
    assert outbox.due_for_resend() == []
    age(write, claimed=outbox.lease() + timedelta(seconds=5))

    resend_stale_writes.delay()

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert write.attempts == 2
    assert len(standin.comments(REPO, number)) == 1
    assert "triage review" in standin.label_names(REPO, number)


def test_a_worker_that_lost_its_claim_cannot_overwrite_the_newer_result(standin):
    _, write = decided(standin)
    late = claimed(write)
    age(write, claimed=outbox.lease() + timedelta(seconds=5))
    newer = claimed(write)
    outbox.apply(newer)
    assert Write.objects.get(pk=write.pk).state == Write.State.APPLIED

    # The first worker wakes up and reports a failure it saw long ago.
    assert outbox.give_up(late, "GitHub unreachable") is False
    assert outbox.postpone(late, "GitHub unreachable", 5) is False
    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert write.last_error == ""


def test_a_label_a_human_removed_after_the_write_added_it_is_not_added_again(standin):
    number, write = decided(
        standin,
        labels=("oncall: pt2", "needs reproduction"),
        add_labels=["module: dynamo"],
        remove_labels=["needs reproduction"],
        comment_body="",
    )
    write = claimed(write)
    standin.inject("DELETE", r"/labels/", 502)
    with pytest.raises(RetryableGitHubError):
        outbox.apply(write)
    assert "module: dynamo" in standin.label_names(REPO, number)
    # While the write waits to retry, a human takes the label off again.
    standin.set_labels(REPO, number, ["oncall: pt2", "needs reproduction"])
    Write.objects.filter(pk=write.pk).update(state=Write.State.QUEUED, claim_token=None)

    write = claimed(write)
    outbox.apply(write)

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert standin.label_names(REPO, number) == ["oncall: pt2"]
    assert write.sent["withdrawn_on_github"] == ["module: dynamo"]


def test_a_decision_made_while_the_broker_is_down_is_kept_and_sent_later(
    client, standin, broker_down
):
    from tests.factories import make_issue
    from triage.models import Queue

    issue = make_issue(body=CRASH_BODY, labels=["oncall: pt2"])
    standin.add_issue(REPO, raw_issue(issue.number, body=CRASH_BODY, labels=["oncall: pt2"]))
    proposal = propose(issue, Queue.objects.get(slug="pt2"))
    assert proposal is not None
    client.force_login(make_user("oncall", oncall=True))

    response = client.post(f"/p/{proposal.pk}/decide/", {"kind": "accept"})

    assert response.status_code == 302
    write = Write.objects.get(decision__proposal=proposal)
    assert (write.state, write.attempts) == (Write.State.QUEUED, 0)
    broker_down.restore()
    age(write, due=outbox.resend_after() + timedelta(seconds=5))
    resend_stale_writes.delay()
    write.refresh_from_db()
    assert write.state == Write.State.APPLIED


def test_a_comment_github_posted_after_the_client_gave_up_is_not_posted_again(standin, settings):
    import time

    settings.GITHUB_TIMEOUT_SECONDS = 1
    number, write = decided(standin, comment_body="Could you share a reproducer?")
    # GitHub is slow: the client gives up, and GitHub posts the comment all the same.
    standin.inject("POST", r"/comments$", 0, delay=1.5)
    write = claimed(write)
    with pytest.raises(RetryableGitHubError):
        outbox.apply(write)
    time.sleep(1.0)
    assert len(standin.comments(REPO, number)) == 1

    Write.objects.filter(pk=write.pk).update(state=Write.State.QUEUED, claim_token=None)
    write = claimed(write)
    outbox.apply(write)

    write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert len(standin.comments(REPO, number)) == 1


# ----------------------------------------------------------------------------- undo


def test_a_write_waits_out_its_undo_window_before_it_can_be_claimed(standin, settings):
    settings.TRIAGE_UNDO_SECONDS = 10
    number, write = decided(standin)
    assert 0 < write.undo_seconds_left <= 10
    assert outbox.claim(write.pk) is None
    Write.objects.filter(pk=write.pk).update(due_at=timezone.now() - timedelta(seconds=1))
    write = claimed(write)
    outbox.apply(write)
    assert "triage review" in standin.label_names(REPO, number)


def test_undo_withdraws_the_write_and_puts_the_issue_back(client, standin, settings):
    settings.TRIAGE_UNDO_SECONDS = 10
    number, write = decided(standin)
    assert write.decision is not None
    proposal = write.decision.proposal
    client.force_login(make_user("undoer", oncall=True))

    page = client.get(f"/p/{proposal.pk}/?after={write.decision.pk}").content.decode()
    assert "Undo (<kbd>u</kbd>)" in page and 'data-key="u"' in page
    response = client.post(f"/w/{write.pk}/undo/")

    assert response.status_code == 302
    write.refresh_from_db()
    proposal.refresh_from_db()
    assert write.state == Write.State.WITHDRAWN
    assert proposal.status == Proposal.Status.PENDING
    # Nothing is ever sent, even by beat.
    Write.objects.filter(pk=write.pk).update(due_at=timezone.now() - timedelta(minutes=5))
    resend_stale_writes.delay()
    assert standin.writes() == []
    assert "triage review" not in standin.label_names(REPO, number)


def test_after_the_undo_window_undo_is_gone_and_the_write_goes(client, standin, settings):
    settings.TRIAGE_UNDO_SECONDS = 10
    number, write = decided(standin)
    Write.objects.filter(pk=write.pk).update(due_at=timezone.now() - timedelta(seconds=1))
    write.refresh_from_db()
    assert write.undo_seconds_left == 0
    client.force_login(make_user("late", oncall=True))
    client.post(f"/w/{write.pk}/undo/")
    write.refresh_from_db()
    assert write.state == Write.State.QUEUED
    apply_write.delay(write.pk)
    assert "triage review" in standin.label_names(REPO, number)


def test_a_viewer_cannot_undo(client, standin, settings):
    settings.TRIAGE_UNDO_SECONDS = 10
    _, write = decided(standin)
    client.force_login(make_user("viewer", oncall=False))
    assert client.post(f"/w/{write.pk}/undo/").status_code == 403
    write.refresh_from_db()
    assert write.state == Write.State.QUEUED


@pytest.mark.django_db(transaction=True)
def test_in_process_tasks_send_the_write_when_the_window_closes(standin, settings):
    import time

    from tests.factories import ensure_default_queues
    from triage.tasks import send_write_on_commit

    ensure_default_queues()
    settings.TRIAGE_UNDO_SECONDS = 0.5
    number, write = decided(standin)
    send_write_on_commit(write.pk)  # autocommit: the window starts now
    time.sleep(0.2)
    write.refresh_from_db()
    assert write.state == Write.State.QUEUED  # still undoable

    deadline = time.monotonic() + 5
    while write.state != Write.State.APPLIED and time.monotonic() < deadline:
        time.sleep(0.05)
        write.refresh_from_db()
    assert write.state == Write.State.APPLIED
    assert "triage review" in standin.label_names(REPO, number)


def test_history_shows_every_write_as_text_decisions_and_outcomes(client, standin):
    _number, write = decided(standin, comment_body="Could you share a reproducer?")
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.decision is not None
    issue = write.decision.proposal.issue
    client.force_login(make_user("reader", oncall=False))

    html = client.get(f"/i/{issue.pk}/history/").content.decode()

    assert "GitHub write:" in html and "applied" in html
    assert 'Added <span class="chip add">triage review</span>' in html
    assert f'#issuecomment-{write.sent["comment_id"]}"' in html
    assert "{&#x27;added&#x27;" not in html and "{'added'" not in html


def test_the_conflict_card_says_where_the_issue_went(client, standin):
    number, write = decided(standin)
    # Someone finishes the triage on GitHub: the issue leaves the pt2 queue.
    standin.set_labels(REPO, number, ["oncall: pt2", "triage review", "triaged"])
    apply_write.delay(write.pk)
    write.refresh_from_db()
    assert write.state == Write.State.CONFLICT
    assert write.decision is not None
    client.force_login(make_user("reader2", oncall=True))

    html = client.get(f"/w/{write.pk}/").content.decode()

    assert "Conflict: Changed on GitHub since it was approved: triage review" in html
    assert "The issue has left the PT2 queue" in html
    assert '<span class="chip">triaged</span>' in html
