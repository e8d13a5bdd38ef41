from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.factories import REPO, make_issue, make_proposal, raw_issue
from triage import agenda, ingest, outbox
from triage.models import AgendaItem, Decision, Issue, Meeting, Proposal, Write
from triage.tasks import send_write_on_commit

pytestmark = pytest.mark.django_db

CRASH_BODY = """Segmentation fault (core dumped) when compiling.

```python
import torch
torch.compile(lambda x: x.sin())(torch.randn(3))
```
"""
TODAY = timezone.localdate()
LAST_WEEK = TODAY - timedelta(days=7)


def escalate(proposal: Proposal, user, note: str = "Hits a popular HF model") -> Decision:
    decision = outbox.decide(
        proposal,
        kind="escalate",
        user=user,
        add_labels=list(proposal.add_labels),
        remove_labels=list(proposal.remove_labels),
        comment_body="",
        close=False,
        note=note,
    )
    assert decision is not None
    return decision


def built(day: date = TODAY) -> Meeting:
    meeting = agenda.open_meeting(day)
    agenda.build(meeting)
    return meeting


def item_of(meeting: Meeting, issue: Issue) -> AgendaItem:
    return AgendaItem.objects.get(meeting=meeting, issue=issue)


def decide_item(item: AgendaItem, user, outcome: str = "not a priority", **fields) -> AgendaItem:
    values = {"owner": "", "add_labels": [], "remove_labels": [], "note": ""} | fields
    made = agenda.record(item, user, outcome, **values)
    assert made is not None
    # As the view does: the write is sent once the outcome is committed.
    send_write_on_commit(made.write.pk)
    return made


# ----------------------------------------------------------------------------- membership


def test_an_escalation_in_the_console_is_on_the_agenda_with_its_note(oncall):
    proposal = make_proposal(number=101)
    decision = escalate(proposal, oncall, note="Seen in three workloads")
    make_proposal(number=102)  # neither escalated, labelled nor suggesting escalation

    meeting = built()

    item = AgendaItem.objects.get(meeting=meeting)
    assert item.issue == proposal.issue
    assert item.reasons == ["escalated in the console by oncall: Seen in three workloads"]
    assert item.escalation == decision
    assert item.queue == proposal.queue
    assert item.status == AgendaItem.Status.OPEN


def test_only_escalations_since_the_previous_meeting_are_added(oncall):
    old = escalate(make_proposal(number=111), oncall, note="old")
    Decision.objects.filter(pk=old.pk).update(decided_at=timezone.now() - timedelta(days=30))
    new = escalate(make_proposal(number=112), oncall, note="new")
    Meeting.objects.create(date=LAST_WEEK)

    meeting = built()

    assert [i.escalation_id for i in meeting.items.all()] == [new.pk]


def test_open_issues_labelled_on_github_are_on_the_agenda(oncall):
    labelled = make_issue(number=121, labels=["oncall: pt2", "triage review"])
    make_issue(number=122, labels=["oncall: pt2", "triage review"], state="closed")
    make_issue(number=123, labels=["oncall: pt2"])

    meeting = built()

    item = AgendaItem.objects.get(meeting=meeting)
    assert item.issue == labelled
    assert item.reasons == ["labelled `triage review` on GitHub"]
    assert item.queue is not None and item.queue.slug == "pt2"


def test_the_label_lookup_works_without_json_containment_as_on_sqlite(oncall, monkeypatch):
    labelled = make_issue(number=125, labels=["oncall: pt2", "triage review"])
    suggested = make_proposal(number=126, body=CRASH_BODY)
    monkeypatch.setattr(connection.features, "supports_json_field_contains", False)

    meeting = built()

    assert {i.issue_id for i in meeting.items.all()} == {labelled.pk, suggested.issue_id}


def test_a_proposal_suggesting_escalation_puts_the_issue_on_the_agenda(oncall):
    proposal = make_proposal(number=131, body=CRASH_BODY)
    assert "triage review" in proposal.add_labels
    make_proposal(number=132)

    meeting = built()

    item = AgendaItem.objects.get(meeting=meeting)
    assert item.issue == proposal.issue
    assert item.reasons == [f"the proposal suggests escalation: {proposal.rationale}"]


def test_an_issue_from_several_sources_is_listed_once_with_every_reason(oncall):
    proposal = make_proposal(number=141, body=CRASH_BODY)
    # Labelled on GitHub since it was proposed, and synced; not re-proposed yet.
    Issue.objects.filter(pk=proposal.issue_id).update(labels=["oncall: pt2", "triage review"])

    meeting = built()
    assert agenda.build(meeting) == 0  # idempotent

    item = AgendaItem.objects.get(meeting=meeting)
    assert item.reasons == [
        "labelled `triage review` on GitHub",
        f"the proposal suggests escalation: {proposal.rationale}",
    ]


def test_an_item_decided_at_an_earlier_meeting_is_not_added_again(oncall):
    escalated = make_proposal(number=151, body=CRASH_BODY)
    escalate(escalated, oncall)
    suggested = make_proposal(number=152, body=CRASH_BODY)
    first = built(LAST_WEEK)
    decide_item(item_of(first, escalated.issue), oncall, "needs reproduction")
    decide_item(item_of(first, suggested.issue), oncall, "needs reproduction")
    # The issue changes and is proposed afresh, suggesting escalation again, and the label is
    # still there (the meeting's write has not landed): none of it brings it back.
    make_proposal(number=152, body=CRASH_BODY + "\nstill crashes")
    for issue in (escalated.issue, suggested.issue):
        Issue.objects.filter(pk=issue.pk).update(labels=["oncall: pt2", "triage review"])

    second = built()

    assert not second.items.exists()


def test_an_escalation_after_the_meeting_decided_brings_the_issue_back(oncall):
    proposal = make_proposal(number=153, body=CRASH_BODY)
    escalate(proposal, oncall)
    first = built(LAST_WEEK)
    decide_item(item_of(first, proposal.issue), oncall)
    # A decided issue is never re-proposed in its queue; redirected to another one, it can be
    # escalated again.
    again = make_proposal("triage", number=153, body=CRASH_BODY, labels=[])
    escalate(again, oncall, note="It got worse")

    second = built()

    item = item_of(second, proposal.issue)
    assert item.reasons == ["escalated in the console by oncall: It got worse"]
    assert item.queue == again.queue


# ----------------------------------------------------------------------------- roll-over


def test_open_items_roll_over_and_decided_ones_stay(oncall):
    reached = make_issue(number=161, labels=["oncall: pt2", "triage review"])
    missed = make_issue(number=162, labels=["oncall: pt2", "triage review"])
    first = built(LAST_WEEK)
    decide_item(item_of(first, reached), oncall)

    second = agenda.open_meeting(TODAY)

    old = item_of(first, missed)
    rolled = item_of(second, missed)
    assert old.status == AgendaItem.Status.ROLLED_OVER
    assert rolled.rolled_from == old
    assert rolled.status == AgendaItem.Status.OPEN
    assert rolled.reasons == [
        f"rolled over from {LAST_WEEK.isoformat()}",
        "labelled `triage review` on GitHub",
    ]
    assert not AgendaItem.objects.filter(meeting=second, issue=reached).exists()
    assert item_of(first, reached).status == AgendaItem.Status.DECIDED
    # Building merges rather than duplicates.
    agenda.build(second)
    assert item_of(second, missed).reasons == rolled.reasons


def test_a_past_meeting_is_kept_as_it_was(oncall):
    make_issue(number=171, labels=["oncall: pt2", "triage review"])
    first = built(LAST_WEEK)
    agenda.open_meeting(TODAY)
    make_issue(number=172, labels=["oncall: pt2", "triage review"])

    with pytest.raises(agenda.AgendaError):
        agenda.build(first)
    with pytest.raises(agenda.AgendaError):
        agenda.open_meeting(LAST_WEEK - timedelta(days=7))
    assert agenda.open_meeting(LAST_WEEK) == first
    assert first.items.count() == 1


# ----------------------------------------------------------------------------- outcomes


def on_github(standin, number: int, labels: list[str]) -> Issue:
    """The issue on the stand-in and, synced, in the console."""
    raw = raw_issue(number, title="Segfault when compiling sin", body=CRASH_BODY, labels=labels)
    standin.add_issue(REPO, raw)
    issue, _ = ingest.upsert(REPO, ingest.parse(raw))
    return issue


def test_an_outcome_reaches_github_only_once_approved(
    client, oncall, standin, django_capture_on_commit_callbacks
):
    issue = on_github(standin, 181, ["oncall: pt2", "triage review"])
    client.force_login(oncall)
    response = client.post(reverse("meetings"), {"date": TODAY.isoformat()})
    assert response.status_code == 302
    assert response["Location"] == reverse("meeting", args=[TODAY.isoformat()])
    item = AgendaItem.objects.get(issue=issue)
    client.get(response["Location"])
    assert standin.writes() == []
    assert not Write.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("agenda-outcome", args=[TODAY.isoformat(), item.pk]),
            {
                "outcome": "high priority",
                "owner": "@alice",
                "add": ["module: dynamo", ""],
                "note": "Seen in three HF models.",
            },
        )

    assert response.status_code == 302
    assert response["Location"].endswith(f"#item-{item.pk}")
    labels = standin.label_names(REPO, 181)
    assert "high priority" in labels
    assert "module: dynamo" in labels
    assert "triage review" not in labels
    comments = standin.comments(REPO, 181)
    assert len(comments) == 1
    assert comments[0]["body"].startswith(
        f"Triage review {TODAY.isoformat()}: high priority, owner @alice. Seen in three HF models."
    )
    item.refresh_from_db()
    assert item.status == AgendaItem.Status.DECIDED
    assert item.outcome == "high priority"
    assert item.owner == "alice"
    assert item.decided_by == oncall
    assert item.labels_seen == ["oncall: pt2", "triage review"]
    assert item.write.state == Write.State.APPLIED


def test_high_priority_cannot_be_set_through_the_decide_view(client, oncall):
    proposal = make_proposal(number=191)
    client.force_login(oncall)
    response = client.post(
        reverse("decide", args=[proposal.pk]), {"kind": "edit", "add": ["high priority"]}
    )
    assert response.status_code == 422
    assert not Decision.objects.exists()


@pytest.mark.parametrize(
    ("outcome", "fields", "error"),
    [
        ("", {}, "Choose an outcome"),
        ("urgent", {}, "Choose an outcome"),
        ("not a priority", {"add_labels": ["high priority"]}, "“high priority” outcome only"),
        ("labels", {"add_labels": ["module: nonexistent"]}, "not a label of the repository"),
        ("labels", {"add_labels": ["triage review"]}, "removed, not added"),
        ("labels", {"remove_labels": ["module: docs"]}, "not on the issue"),
        ("labels", {"owner": "not a login!"}, "not a GitHub login"),
        (
            "labels",
            {"add_labels": ["module: docs"], "remove_labels": ["module: docs"]},
            "both added and removed",
        ),
    ],
)
def test_an_invalid_outcome_is_refused_and_writes_nothing(oncall, outcome, fields, error):
    issue = make_issue(number=201, labels=["oncall: pt2", "triage review", "module: docs"])
    item = item_of(built(), issue)
    if "remove_labels" in fields and "add_labels" not in fields:
        Issue.objects.filter(pk=issue.pk).update(labels=["oncall: pt2", "triage review"])
    values = {"owner": "", "add_labels": [], "remove_labels": [], "note": ""} | fields
    with pytest.raises(agenda.AgendaError, match=error):
        agenda.record(item, oncall, outcome, **values)
    item.refresh_from_db()
    assert item.status == AgendaItem.Status.OPEN
    assert not Write.objects.exists()


def test_outcomes_imply_their_labels_and_always_remove_triage_review(oncall):
    issues = {
        outcome: make_issue(number=210 + n, labels=["oncall: pt2", "triage review"])
        for n, outcome in enumerate(AgendaItem.Outcome.values)
    }
    meeting = built()
    for outcome, issue in issues.items():
        decide_item(item_of(meeting, issue), oncall, outcome)
    added = {outcome: item_of(meeting, issue).add_labels for outcome, issue in issues.items()}
    assert added == {
        "high priority": ["high priority"],
        "not a priority": [],
        "needs reproduction": ["needs reproduction"],
        "labels": [],
    }
    for issue in issues.values():
        assert item_of(meeting, issue).remove_labels == ["triage review"]
    assert Write.objects.filter(outcome__meeting=meeting).count() == 4


def test_a_conflict_reopens_the_item_and_it_can_be_decided_again(
    oncall, standin, django_capture_on_commit_callbacks
):
    issue = on_github(standin, 221, ["oncall: pt2", "triage review"])
    item = item_of(built(), issue)
    # A human removes `triage review` on GitHub before the write runs.
    standin.set_labels(REPO, 221, ["oncall: pt2"])
    with django_capture_on_commit_callbacks(execute=True):
        decide_item(item, oncall, "high priority")
    item.refresh_from_db()
    assert item.status == AgendaItem.Status.OPEN
    assert item.write.state == Write.State.CONFLICT
    assert "high priority" not in standin.label_names(REPO, 221)

    with django_capture_on_commit_callbacks(execute=True):
        decide_item(item, oncall, "high priority", note="Confirmed again.")

    item.refresh_from_db()
    assert item.write.state == Write.State.APPLIED
    assert standin.label_names(REPO, 221) == ["oncall: pt2", "high priority"]
    assert len(standin.comments(REPO, 221)) == 1


# ----------------------------------------------------------------------------- views


def urls(meeting: Meeting, item: AgendaItem) -> dict[str, str]:
    day = meeting.date.isoformat()
    return {
        "meetings": reverse("meetings"),
        "meeting": reverse("meeting", args=[day]),
        "refresh": reverse("meeting-refresh", args=[day]),
        "markdown": reverse("meeting-markdown", args=[day]),
        "outcome": reverse("agenda-outcome", args=[day, item.pk]),
    }


@pytest.fixture
def labelled_item(db) -> AgendaItem:
    issue = make_issue(number=231, labels=["oncall: pt2", "triage review"])
    return item_of(built(), issue)


def test_anonymous_users_are_sent_to_log_in(client, labelled_item):
    for name, url in urls(labelled_item.meeting, labelled_item).items():
        for response in (client.get(url), client.post(url, {"outcome": "labels"})):
            assert response.status_code == 302, name
            assert response["Location"].startswith(reverse("login")), name
    labelled_item.refresh_from_db()
    assert labelled_item.status == AgendaItem.Status.OPEN


def test_viewers_read_but_may_not_change_anything(client, viewer, labelled_item):
    client.force_login(viewer)
    links = urls(labelled_item.meeting, labelled_item)
    for name in ("meetings", "meeting", "markdown"):
        assert client.get(links[name]).status_code == 200, name
    html = client.get(links["meeting"]).content.decode()
    assert "#231" in html
    assert 'name="outcome"' not in html
    assert "Refresh the agenda" not in html
    assert client.post(links["meetings"], {"date": TODAY.isoformat()}).status_code == 403
    assert client.post(links["refresh"]).status_code == 403
    assert client.post(links["outcome"], {"outcome": "labels"}).status_code == 403
    labelled_item.refresh_from_db()
    assert labelled_item.status == AgendaItem.Status.OPEN


def test_bad_dates_and_unknown_items_are_404(client, oncall, labelled_item):
    client.force_login(oncall)
    day = labelled_item.meeting.date.isoformat()
    for bad in ("2026-13-01", "20261124", "nope", "2026-W48-2"):
        assert client.get(reverse("meeting", args=[bad])).status_code == 404, bad
    assert client.get(reverse("meeting", args=["2001-01-02"])).status_code == 404
    assert client.get(reverse("meeting-markdown", args=["2001-01-02"])).status_code == 404
    other = Meeting.objects.create(date=TODAY + timedelta(days=7))
    url = reverse("agenda-outcome", args=[other.date.isoformat(), labelled_item.pk])
    assert client.post(url, {"outcome": "labels"}).status_code == 404
    url = reverse("agenda-outcome", args=[day, 999999])
    assert client.post(url, {"outcome": "labels"}).status_code == 404
    response = client.post(reverse("meetings"), {"date": "soon"})
    assert response.status_code == 422
    assert "YYYY-MM-DD" in response.content.decode()


def test_the_meetings_page_lists_meetings_and_offers_a_date(client, oncall, labelled_item):
    client.force_login(oncall)
    html = client.get(reverse("meetings")).content.decode()
    assert labelled_item.meeting.date.isoformat() in html
    offered = agenda.suggested_day(TODAY)
    assert f'value="{offered.isoformat()}"' in html
    # A Tuesday, after the latest meeting (which is today's).
    assert offered.weekday() == 1
    assert TODAY < offered <= TODAY + timedelta(days=7)
    assert agenda.next_meeting_day(date(2026, 11, 24)) == date(2026, 11, 24)
    assert agenda.next_meeting_day(date(2026, 11, 25)) == date(2026, 12, 1)


def test_the_meeting_page_shows_reasons_note_escalator_and_proposal(client, oncall):
    proposal = make_proposal(number=241, body=CRASH_BODY)
    escalate(proposal, oncall, note="Blocks the release")
    meeting = built()
    client.force_login(oncall)
    html = client.get(reverse("meeting", args=[meeting.date.isoformat()])).content.decode()
    assert "<h2>PT2</h2>" in html
    assert "module: dynamo" in html
    assert "escalated in the console by oncall: Blocks the release" in html
    assert "Escalated by <strong>oncall</strong>" in html
    assert "+ triage review" in html  # the proposal's chips
    assert 'name="outcome"' in html
    assert 'list="known-labels"' in html
    assert '<option value="high priority">' in html


def test_htmx_refresh_answers_with_the_agenda(client, oncall):
    meeting = built()
    make_issue(number=251, labels=["oncall: pt2", "triage review"])
    client.force_login(oncall)
    url = reverse("meeting-refresh", args=[meeting.date.isoformat()])
    response = client.post(url, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="agenda">')
    assert "1 item added." in html
    assert "#251" in html
    response = client.post(url)
    assert response.status_code == 302
    assert response["Location"].endswith("?added=0")


def test_refreshing_a_past_meeting_is_refused(client, oncall):
    first = built(LAST_WEEK)
    built(TODAY)
    client.force_login(oncall)
    response = client.post(reverse("meeting-refresh", args=[first.date.isoformat()]))
    assert response.status_code == 409
    html = client.get(reverse("meeting", args=[first.date.isoformat()])).content.decode()
    assert "kept as it was" in html
    # Opening a past meeting's date again shows it, unchanged.
    response = client.post(reverse("meetings"), {"date": first.date.isoformat()})
    assert response["Location"] == reverse("meeting", args=[first.date.isoformat()])


def test_htmx_outcome_swaps_the_item_and_refuses_a_second_one(client, oncall, labelled_item):
    client.force_login(oncall)
    url = urls(labelled_item.meeting, labelled_item)["outcome"]
    headers = {"HX-Request": "true"}
    response = client.post(url, {"outcome": "needs reproduction"}, headers=headers)
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith("<section")
    assert f'id="item-{labelled_item.pk}"' in html
    assert "Needs reproduction" in html
    # The write is queued (its task runs on commit): the item polls until it settles.
    assert 'hx-trigger="every 1s"' in html
    assert client.get(url, headers=headers).status_code == 200
    assert client.get(url)["Location"].endswith(f"#item-{labelled_item.pk}")

    again = client.post(url, {"outcome": "high priority"}, headers=headers)
    assert again.status_code == 409
    assert "already decided" in again.content.decode()
    labelled_item.refresh_from_db()
    assert labelled_item.outcome == "needs reproduction"


def test_an_invalid_outcome_shows_why_on_the_item(client, oncall, labelled_item):
    client.force_login(oncall)
    url = urls(labelled_item.meeting, labelled_item)["outcome"]
    data = {"outcome": "labels", "add": ["no such label"], "note": "keep me"}
    response = client.post(url, data, headers={"HX-Request": "true"})
    assert response.status_code == 422
    html = response.content.decode()
    assert "not a label of the repository" in html
    assert ">keep me</textarea>" in html
    response = client.post(url, data)
    assert response.status_code == 422
    assert f'id="outcome-error-{labelled_item.pk}"' in response.content.decode()


def test_a_failed_outcome_write_can_be_retried(client, oncall, labelled_item):
    decide_item(labelled_item, oncall)
    Write.objects.filter(outcome=labelled_item).update(
        state=Write.State.FAILED, last_error="GitHub refused (404)"
    )
    client.force_login(oncall)
    url = urls(labelled_item.meeting, labelled_item)["outcome"]
    html = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "Failed: GitHub refused (404)" in html
    assert 'name="action" value="retry"' in html
    client.post(url, {"action": "retry"}, headers={"HX-Request": "true"})
    assert Write.objects.get(outcome=labelled_item).state == Write.State.QUEUED


def test_the_markdown_export_carries_the_agenda_and_its_outcomes(client, viewer, oncall):
    decided_issue = make_issue(
        number=261, title="Segfault [in] *sin*", labels=["oncall: pt2", "triage review"]
    )
    escalated = make_proposal(number=262, body=CRASH_BODY)
    escalate(escalated, oncall, note="Blocks the release")
    meeting = built()
    decide_item(
        item_of(meeting, decided_issue),
        oncall,
        "high priority",
        owner="alice",
        note="Seen in three HF models",
    )
    client.force_login(viewer)
    response = client.get(reverse("meeting-markdown", args=[meeting.date.isoformat()]))
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    text = response.content.decode()
    assert text.startswith(f"# Triage review {meeting.date.isoformat()}\n")
    assert "\n## PT2\n" in text
    assert "\n### module: dynamo\n" in text
    assert "\n### no module\n" in text
    assert "Segfault \\[in\\] \\*sin\\*" in text
    assert (
        "**Outcome:** high priority, owner @alice (+`high priority`, -`triage review`). "
        "Seen in three HF models — approved by oncall; GitHub write: queued"
    ) in text
    assert "escalated in the console by oncall: Blocks the release" in text
    assert "**Outcome:** not reached yet" in text


def test_the_meeting_page_runs_a_constant_number_of_queries(client, oncall):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("meeting", args=[TODAY.isoformat()]))
        assert response.status_code == 200
        return len(queries)

    def add_items(first: int, n: int) -> None:
        for number in range(first, first + n):
            escalate(make_proposal(number=number, body=CRASH_BODY), oncall)
            make_issue(number=number + 100, labels=["oncall: pt2", "triage review"])
            make_proposal(number=number + 200, body=CRASH_BODY)

    client.force_login(oncall)
    add_items(300, 1)
    meeting = built()
    decide_item(AgendaItem.objects.filter(meeting=meeting).earliest("pk"), oncall, "high priority")
    small = count()
    add_items(310, 10)
    agenda.build(meeting)
    for item in AgendaItem.objects.filter(meeting=meeting)[:5]:
        if item.status == AgendaItem.Status.OPEN:
            decide_item(item, oncall)
    assert meeting.items.count() == 33
    large = count()
    # The page of items with their proposals, the count of all, and the queues the user decides.
    assert small == large == 12


def test_a_meeting_far_from_today_needs_a_confirmation(client, oncall):
    client.force_login(oncall)
    far = (timezone.localdate() + timedelta(days=365 * 9)).isoformat()

    response = client.post(reverse("meetings"), {"date": far})

    assert response.status_code == 422
    html = response.content.decode()
    assert "days from today" in html and 'name="confirm"' in html
    assert not Meeting.objects.exists()
    response = client.post(reverse("meetings"), {"date": far, "confirm": "yes"})
    assert response.status_code == 302
    assert Meeting.objects.get().date.isoformat() == far


def test_a_meeting_opened_by_mistake_can_be_deleted_in_the_admin(admin_client):
    meeting = agenda.open_meeting(timezone.localdate() + timedelta(days=3000))
    response = admin_client.post(
        reverse("admin:triage_meeting_delete", args=[meeting.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Meeting.objects.exists()


def test_a_meeting_outcome_can_be_undone_within_its_window(client, oncall, standin, settings):
    settings.TRIAGE_UNDO_SECONDS = 10
    issue = on_github(standin, 231, ["oncall: pt2", "triage review"])
    item = item_of(built(), issue)
    decide_item(item, oncall, "high priority")
    write = Write.objects.get(outcome=item)
    assert write.undo_seconds_left > 0
    client.force_login(oncall)

    response = client.post(reverse("undo-write", args=[write.pk]))

    assert response.status_code == 302 and f"#item-{item.pk}" in response["Location"]
    item.refresh_from_db()
    write.refresh_from_db()
    assert item.status == AgendaItem.Status.OPEN
    assert write.state == Write.State.WITHDRAWN
    assert "high priority" not in standin.label_names(REPO, 231)


def test_an_outcome_and_its_write_are_in_the_issues_history(
    client, oncall, standin, django_capture_on_commit_callbacks
):
    issue = on_github(standin, 241, ["oncall: pt2", "triage review"])
    item = item_of(built(), issue)
    with django_capture_on_commit_callbacks(execute=True):
        decide_item(item, oncall, "high priority", note="Seen in three models")
    client.force_login(oncall)

    html = client.get(reverse("history", args=[issue.pk])).content.decode()

    assert f"Triage review {TODAY.isoformat()} · High priority confirmed" in html
    assert "Seen in three models" in html
    assert "GitHub write:" in html and "applied" in html
    assert '<span class="chip add">high priority</span>' in html


def test_an_escalation_reaches_the_upcoming_agenda_with_its_note_at_once(
    client, oncall, django_capture_on_commit_callbacks
):
    meeting = agenda.open_meeting(timezone.localdate() + timedelta(days=1))
    agenda.build(meeting)
    proposal = make_proposal(number=251, body=CRASH_BODY)
    client.force_login(oncall)

    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("decide", args=[proposal.pk]),
            {"kind": "escalate", "note": "Blocks the release"},
        )

    item = AgendaItem.objects.get(meeting=meeting, issue=proposal.issue)
    assert any("Blocks the release" in reason for reason in item.reasons)
    html = client.get(reverse("meeting", args=[meeting.date.isoformat()])).content.decode()
    assert "Blocks the release" in html


def test_an_escalation_does_not_go_to_a_meeting_already_held(
    client, oncall, django_capture_on_commit_callbacks
):
    held = agenda.open_meeting(timezone.localdate() - timedelta(days=1))
    proposal = make_proposal(number=252, body=CRASH_BODY)
    client.force_login(oncall)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("decide", args=[proposal.pk]), {"kind": "escalate", "note": "Later"})
    assert not AgendaItem.objects.filter(meeting=held, issue=proposal.issue).exists()


def test_a_long_agenda_pages_in_issue_order(client, oncall, settings):
    settings.TRIAGE_PAGE_SIZE = 2
    client.force_login(oncall)
    for number in (505, 501, 503, 502, 504):
        make_issue(number=number, labels=["oncall: pt2", "triage review"])
    meeting = built()
    url = reverse("meeting", args=[TODAY.isoformat()])
    seen: list[int] = []
    response = client.get(url)
    assert response.context["total"] == 5
    while True:
        seen += [
            entry.item.issue.number
            for group in response.context["groups"]
            for _, entries in group.modules
            for entry in entries
        ]
        after = response.context["next_after"]
        if after is None:
            break
        response = client.get(url, {"after": after})
        assert b'id="first-page"' in response.content
    assert seen == [501, 502, 503, 504, 505]
    assert meeting.items.count() == 5


@pytest.mark.parametrize("query", [{"after": "x"}, {"after": "999999"}, {"added": "-1"}])
def test_a_bad_agenda_page_is_a_bad_request(client, oncall, query):
    client.force_login(oncall)
    built()
    response = client.get(reverse("meeting", args=[TODAY.isoformat()]), query)
    assert response.status_code == 400
