from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import REPO, make_user, raw_issue
from triage import outbox
from triage.models import Decision, Issue, Proposal, Queue, Write
from triage.tasks import apply_write, sync_queue

pytestmark = pytest.mark.django_db


def recent(minutes_ago: int):
    return timezone.now() - timedelta(minutes=minutes_ago)


def sync(slug: str, capture) -> Queue:
    queue = Queue.objects.get(slug=slug)
    with capture(execute=True):
        sync_queue.delay(queue.pk)
    queue.refresh_from_db()
    return queue


def test_sync_reads_the_queue_and_proposes(standin, django_capture_on_commit_callbacks):
    standin.add_issue(REPO, raw_issue(1, created=recent(60), comments=["+1, same here"]))
    standin.add_issue(REPO, raw_issue(2, created=recent(50), labels=["oncall: distributed"]))
    standin.add_issue(REPO, raw_issue(3, created=recent(40), labels=["oncall: pt2", "triaged"]))

    queue = sync("pt2", django_capture_on_commit_callbacks)

    assert queue.sync_state == Queue.SyncState.IDLE
    assert queue.sync_seen == 2  # 1 and 3 carry oncall: pt2; the label filter ran on "GitHub"
    pending = Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING)
    assert [p.issue.number for p in pending] == [1]
    assert Issue.objects.get(number=1).comments[0]["body"] == "+1, same here"
    listing = next(r for r in standin.requests if r.path == f"/repos/{REPO}/issues")
    assert listing.query["labels"] == "oncall: pt2"
    assert listing.query["sort"] == "updated"


def test_second_sync_is_incremental_and_sees_relabelled_issues(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    standin.add_issue(REPO, raw_issue(2, created=recent(50)))
    queue = sync("pt2", django_capture_on_commit_callbacks)
    cursor = queue.sync_cursor
    assert cursor is not None

    # A human triages #1 on GitHub; #2 does not change.
    standin.set_labels(REPO, 1, ["oncall: pt2", "triaged", "module: dynamo"])
    standin.reset_log()
    queue = sync("pt2", django_capture_on_commit_callbacks)

    listing = next(r for r in standin.requests if r.path == f"/repos/{REPO}/issues")
    assert listing.query["since"] == cursor.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert listing.query["state"] == "all"
    # `since` is inclusive: the last issue of the previous sync is read once more, harmlessly.
    assert queue.sync_seen == 2
    first = Proposal.objects.get(issue__number=1)
    assert first.status == Proposal.Status.WITHDRAWN
    assert Proposal.objects.get(issue__number=2).status == Proposal.Status.PENDING


def test_an_edited_issue_gets_a_fresh_proposal(standin, django_capture_on_commit_callbacks):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    sync("pt2", django_capture_on_commit_callbacks)
    standin.edit_issue(REPO, 1, body="It now segfaults: Segmentation fault (core dumped)")
    sync("pt2", django_capture_on_commit_callbacks)

    old, new = Proposal.objects.filter(issue__number=1).order_by("pk")
    assert old.status == Proposal.Status.SUPERSEDED
    assert new.status == Proposal.Status.PENDING
    assert "triage review" in new.add_labels
    assert new.input_hash != old.input_hash


def decided_two_minutes_ago(proposal, capture, *, kind="reject", add=()):
    with capture(execute=True):
        decision = outbox.decide(
            proposal,
            kind=kind,
            user=make_user("o", oncall=True),
            add_labels=list(add),
            remove_labels=[],
            comment_body="",
            close=False,
            note="wrong component",
        )
    assert decision is not None
    # The decision (and its write) took effect a while ago: GitHub's later changes are a human's.
    earlier = timezone.now() - timedelta(minutes=2)
    Decision.objects.filter(pk=decision.pk).update(decided_at=earlier)
    Write.objects.filter(decision=decision).update(applied_at=earlier)
    return decision


def test_a_decided_issue_stays_decided_while_nothing_changes(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    sync("pt2", django_capture_on_commit_callbacks)
    decided_two_minutes_ago(Proposal.objects.get(), django_capture_on_commit_callbacks)
    sync("pt2", django_capture_on_commit_callbacks)
    assert Proposal.objects.filter(status="pending").count() == 0


def test_a_decided_issue_changed_on_github_comes_back_with_a_fresh_proposal(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    sync("pt2", django_capture_on_commit_callbacks)
    first = Proposal.objects.get()
    decided_two_minutes_ago(first, django_capture_on_commit_callbacks)

    standin.edit_issue(REPO, 1, body="Segmentation fault (core dumped)")
    sync("pt2", django_capture_on_commit_callbacks)

    fresh = Proposal.objects.get(status="pending")
    assert fresh.pk != first.pk
    assert "triage review" in fresh.add_labels
    first.refresh_from_db()
    assert first.status == "decided"


def test_the_consoles_own_write_does_not_bring_an_issue_back(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    sync("pt2", django_capture_on_commit_callbacks)
    proposal = Proposal.objects.get()
    # An edit that keeps the issue in the queue (no `triaged`): only its label is new on GitHub.
    with django_capture_on_commit_callbacks(execute=True):
        decision = outbox.decide(
            proposal,
            kind="edit",
            user=make_user("o", oncall=True),
            add_labels=["module: dynamo"],
            remove_labels=[],
            comment_body="",
            close=False,
            note="",
        )
    assert decision is not None
    apply_write.delay(decision.write.pk)
    assert "module: dynamo" in standin.label_names(REPO, 1)
    sync("pt2", django_capture_on_commit_callbacks)
    assert Proposal.objects.filter(status="pending").count() == 0

    # A human answers a minute later: now it is back.
    Write.objects.update(applied_at=timezone.now() - timedelta(minutes=2))
    standin.add_comment(REPO, 1, "It also fails with dynamic=False.")
    sync("pt2", django_capture_on_commit_callbacks)
    assert Proposal.objects.filter(status="pending").count() == 1


def test_a_new_rubric_version_reproposes_pending_but_not_decided(
    standin, django_capture_on_commit_callbacks
):
    from triage.tasks import repropose_stale

    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    standin.add_issue(REPO, raw_issue(2, created=recent(50)))
    sync("pt2", django_capture_on_commit_callbacks)
    first, second = Proposal.objects.order_by("issue__number")
    outbox.decide(
        first,
        kind="reject",
        user=make_user("o", oncall=True),
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="no",
    )
    Proposal.objects.update(rubric_version="an-older-version")
    with django_capture_on_commit_callbacks(execute=True):
        repropose_stale.delay()

    assert Proposal.objects.filter(issue__number=1).count() == 1
    assert (
        Proposal.objects.filter(issue__number=2, status=Proposal.Status.PENDING).get().pk
        != second.pk
    )


def test_the_untriaged_queue_excludes_oncall_labels(standin, django_capture_on_commit_callbacks):
    standin.add_issue(REPO, raw_issue(1, created=recent(60), labels=[]))
    standin.add_issue(REPO, raw_issue(2, created=recent(50), labels=["oncall: jit"]))
    standin.add_issue(REPO, raw_issue(3, created=recent(40), labels=["module: docs"]))
    sync("triage", django_capture_on_commit_callbacks)

    pending = Proposal.objects.filter(queue__slug="triage", status=Proposal.Status.PENDING)
    assert sorted(p.issue.number for p in pending) == [1, 3]


def test_a_rate_limited_sync_retries_and_keeps_progress(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    standin.inject("GET", r"/issues$", 403, retry_after=7)
    queue = Queue.objects.get(slug="pt2")
    with django_capture_on_commit_callbacks(execute=True):
        sync_queue.apply(args=(queue.pk,), throw=False)
    queue.refresh_from_db()
    # Eager mode retried at once; a worker would have waited the 7 s it was told.
    assert queue.sync_state == Queue.SyncState.IDLE
    assert Proposal.objects.filter(queue=queue).count() == 1


def test_a_permanent_sync_failure_is_shown(standin, django_capture_on_commit_callbacks):
    standin.inject("GET", r"/repos/pytorch/pytorch$", 404)
    queue = sync("pt2", django_capture_on_commit_callbacks)
    assert queue.sync_state == Queue.SyncState.FAILED
    assert "404" in queue.sync_error


def test_a_running_sync_is_not_started_twice(standin):
    queue = Queue.objects.get(slug="pt2")
    assert queue.claim_sync()
    assert not queue.claim_sync()
    Queue.objects.filter(pk=queue.pk).update(sync_started_at=timezone.now() - timedelta(hours=1))
    assert queue.claim_sync()


def test_beat_syncs_every_queue(standin, django_capture_on_commit_callbacks):
    from triage.tasks import sync_all_queues

    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    standin.add_issue(REPO, raw_issue(2, created=recent(50), labels=["oncall: distributed"]))
    standin.add_issue(REPO, raw_issue(3, created=recent(40), labels=[]))
    with django_capture_on_commit_callbacks(execute=True):
        sync_all_queues.delay()

    assert set(Queue.objects.values_list("slug", "sync_state")) == {
        ("pt2", "idle"),
        ("distributed", "idle"),
        ("triage", "idle"),
    }
    assert dict(Proposal.objects.values_list("issue__number", "queue__slug")) == {
        1: "pt2",
        2: "distributed",
        3: "triage",
    }


# ----------------------------------------------------------------------------- what cannot be stored


def test_nul_bytes_and_lone_surrogates_are_stored_without_them(
    standin, django_capture_on_commit_callbacks
):
    raw = raw_issue(1, created=recent(60), body="before\x00after \ud800 end", comments=["a\x00b"])
    standin.add_issue(REPO, raw)

    queue = sync("pt2", django_capture_on_commit_callbacks)

    assert queue.sync_state == Queue.SyncState.IDLE and queue.sync_error == ""
    issue = Issue.objects.get(number=1)
    assert issue.body == "beforeafter ? end"
    assert issue.comments[0]["body"] == "ab"


def test_an_issue_that_cannot_be_stored_is_skipped_and_reported(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60)))
    standin.add_issue(REPO, raw_issue(2, created=recent(50), title="x" * 1001))
    standin.add_issue(REPO, raw_issue(3, created=recent(40)))

    queue = sync("pt2", django_capture_on_commit_callbacks)

    assert queue.sync_state == Queue.SyncState.IDLE
    assert queue.sync_seen == 3
    assert "Skipped 1 issue" in queue.sync_error and "#2" in queue.sync_error
    assert sorted(Issue.objects.values_list("number", flat=True)) == [1, 3]
    # The cursor moved past it: the next sync does not stop on it again.
    standin.reset_log()
    queue = sync("pt2", django_capture_on_commit_callbacks)
    assert queue.sync_state == Queue.SyncState.IDLE


def test_a_sync_that_breaks_says_so_at_once(standin, django_capture_on_commit_callbacks):
    # GitHub (here its stand-in) answers the listing with something that is not a list.
    standin.inject("GET", rf"/repos/{REPO}/issues$", 200, body={"unexpected": "shape"}, times=2)
    queue = Queue.objects.get(slug="pt2")
    with pytest.raises(TypeError), django_capture_on_commit_callbacks(execute=True):
        sync_queue.delay(queue.pk)
    queue.refresh_from_db()
    assert queue.sync_state == Queue.SyncState.FAILED
    assert queue.sync_error.startswith("The sync stopped: ")


@pytest.mark.django_db(transaction=True)
def test_two_syncs_storing_the_same_new_issue_do_not_collide():
    """One sync inserts the issue and has not committed yet when the other stores it too."""
    import threading

    from django.db import connection, transaction

    from triage import ingest

    fields = ingest.parse(raw_issue(77, created=recent(5)))
    inserted, stored = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                ingest.upsert(REPO, fields)
                inserted.set()
                # The other sync runs into the unique key now and has to wait for this commit.
                stored.wait(timeout=1.0)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    def second() -> None:
        try:
            inserted.wait(timeout=5)
            issue, changed = ingest.upsert(REPO, fields)
            assert issue.number == 77 and not changed
        except BaseException as exc:
            errors.append(exc)
        finally:
            stored.set()
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert Issue.objects.filter(number=77).count() == 1


def test_an_unchanged_queue_is_polled_for_free(standin, django_capture_on_commit_callbacks):
    standin.add_issue(REPO, raw_issue(1, created=recent(60), comments=["first"]))
    standin.add_issue(REPO, raw_issue(2, created=recent(50)))
    sync("pt2", django_capture_on_commit_callbacks)
    sync("pt2", django_capture_on_commit_callbacks)  # the cursor settles on the newest issue
    standin.reset_log()
    budget_before = Queue.objects.get(slug="pt2").rate_remaining

    queue = sync("pt2", django_capture_on_commit_callbacks)

    counted = [r for r in standin.requests if r.path != "/rate_limit"]
    assert [r.path for r in counted] == [f"/repos/{REPO}/issues"]
    assert counted[0].headers.get("If-None-Match")
    assert standin.not_modified == 1
    assert queue.sync_state == Queue.SyncState.IDLE
    assert queue.rate_remaining == budget_before  # a 304 costs nothing


def test_comments_are_read_only_when_their_count_changed(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=recent(60), comments=["first"]))
    sync("pt2", django_capture_on_commit_callbacks)
    # A label changes: the issue is listed again, but its one comment is already stored.
    standin.set_labels(REPO, 1, ["oncall: pt2", "module: dynamo"])
    standin.reset_log()
    sync("pt2", django_capture_on_commit_callbacks)
    assert not [r for r in standin.requests if r.path.endswith("/comments")]
    assert Issue.objects.get(number=1).comments[0]["body"] == "first"

    standin.add_comment(REPO, 1, "second")
    standin.reset_log()
    sync("pt2", django_capture_on_commit_callbacks)
    assert [r for r in standin.requests if r.path.endswith("/comments")]
    assert [c["body"] for c in Issue.objects.get(number=1).comments] == ["first", "second"]


def test_the_inbox_shows_the_rate_limit_budget(
    client, oncall, standin, django_capture_on_commit_callbacks
):
    from django.urls import reverse

    sync("pt2", django_capture_on_commit_callbacks)
    client.force_login(oncall)
    html = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert "GitHub budget:" in html and "of 5000 requests left this hour" in html


def test_many_issues_get_their_comments_from_the_repository_listing(
    standin, django_capture_on_commit_callbacks
):
    from triage.sync import REPOSITORY_COMMENTS_FROM

    count = REPOSITORY_COMMENTS_FROM + 5
    for number in range(1, count + 1):
        standin.add_issue(
            REPO, raw_issue(number, created=recent(600 - number), comments=[f"a{number}", "b"])
        )
    # Commented long before the first sync's window, relabelled since: the repository's
    # listing of recent comments does not hold its comment, so it is read on its own.
    old = raw_issue(9000, created=recent(60 * 24 * 60), updated=recent(5), comments=["old"])
    old["comments"][0]["created_at"] = recent(60 * 24 * 59).isoformat().replace("+00:00", "Z")
    standin.add_issue(REPO, old)
    standin.reset_log()

    sync("pt2", django_capture_on_commit_callbacks)

    comment_reads = [r.path for r in standin.requests if r.path.endswith("/comments")]
    assert comment_reads == [
        f"/repos/{REPO}/issues/comments",
        f"/repos/{REPO}/issues/9000/comments",
    ]
    assert Issue.objects.get(number=7).comments[0]["body"] == "a7"
    assert [c["body"] for c in Issue.objects.get(number=9000).comments] == ["old"]
    assert Proposal.objects.filter(queue__slug="pt2", status="pending").count() == count + 1
    # Proposed once each, with their comments: the proposal saw what is stored.
    proposal = Proposal.objects.get(issue__number=7, status="pending")
    assert proposal.input_hash == Issue.objects.get(number=7).content_hash


@pytest.mark.django_db(transaction=True)
def test_a_page_that_meets_another_syncs_new_issue_is_stored_one_by_one():
    """The page's one insert fails on the issue another sync stored meanwhile: the page is
    then stored issue by issue, and nothing is skipped."""
    import threading

    from django.db import connection, transaction

    from tests.factories import ensure_default_queues
    from triage import ingest
    from triage.sync import Reader, _store

    queue = ensure_default_queues()

    def no_comments() -> list[dict[str, object]]:
        return []

    page: dict[int, tuple[ingest.IssueFields, int | None, Reader]] = {
        number: (ingest.parse(raw_issue(number, created=recent(5))), 0, no_comments)
        for number in (76, 77, 78)
    }
    inserted, stored = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    skipped: list[str] = []
    kept: list[int] = []

    def first() -> None:
        try:
            with transaction.atomic():
                ingest.upsert(REPO, page[77][0])
                inserted.set()
                stored.wait(timeout=1.0)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def second() -> None:
        try:
            inserted.wait(timeout=5)
            kept.extend(issue.number for issue, *_ in _store(queue, page, skipped))
        except BaseException as exc:
            errors.append(exc)
        finally:
            stored.set()
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == [] and skipped == []
    assert sorted(kept) == [76, 77, 78]
    assert sorted(Issue.objects.values_list("number", flat=True)) == [76, 77, 78]
