from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from tests.factories import ensure_default_queues, make_proposal, make_user
from triage import outbox
from triage.models import Decision, Proposal, Write

pytestmark = pytest.mark.django_db


@pytest.fixture
def proposal():
    return make_proposal(number=4242)


@pytest.fixture
def decided_write(proposal, oncall):
    decision = outbox.decide(
        proposal,
        kind="accept",
        user=oncall,
        add_labels=["module: dynamo"],
        remove_labels=[],
        comment_body="",
        close=False,
        note="",
    )
    assert decision is not None
    Write.objects.filter(decision=decision).update(
        state=Write.State.FAILED, last_error="GitHub refused (404)"
    )
    return decision.write


def read_urls(proposal):
    return [
        reverse("home"),
        reverse("inbox", args=["pt2"]),
        reverse("sync-status", args=["pt2"]),
        reverse("proposal", args=[proposal.pk]),
        reverse("history", args=[proposal.issue_id]),
        reverse("rubric", args=["pt2"]),
        reverse("export-decisions", args=["csv"]),
        reverse("export-decisions", args=["jsonl"]),
    ]


def test_anonymous_users_see_nothing(client, proposal, decided_write):
    urls = [*read_urls(proposal), reverse("write-status", args=[decided_write.pk])]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    for url in [
        reverse("decide", args=[proposal.pk]),
        reverse("start-sync", args=["pt2"]),
        reverse("retry-write", args=[decided_write.pk]),
    ]:
        assert client.post(url, {"kind": "accept"}).status_code == 302, url
    assert Decision.objects.count() == 1


def test_viewers_may_read_everything(client, viewer, proposal, decided_write):
    client.force_login(viewer)
    for url in [*read_urls(proposal), reverse("write-status", args=[decided_write.pk])]:
        assert client.get(url).status_code == 200, url


def test_viewers_may_not_decide_sync_or_retry(client, viewer, proposal, decided_write):
    client.force_login(viewer)
    other = make_proposal(number=4243)
    assert client.post(reverse("decide", args=[other.pk]), {"kind": "accept"}).status_code == 403
    assert client.post(reverse("start-sync", args=["pt2"])).status_code == 403
    assert client.post(reverse("retry-write", args=[decided_write.pk])).status_code == 403
    other.refresh_from_db()
    assert other.status == Proposal.Status.PENDING
    decided_write.refresh_from_db()
    assert decided_write.state == Write.State.FAILED


def test_unknown_objects_are_404(client, oncall):
    client.force_login(oncall)
    assert client.get(reverse("proposal", args=[999999])).status_code == 404
    assert client.post(reverse("decide", args=[999999]), {"kind": "accept"}).status_code == 404
    assert client.get(reverse("inbox", args=["nope"])).status_code == 404
    assert client.get(reverse("rubric", args=["nope"])).status_code == 404
    assert client.get("/decisions.xml").status_code == 404


def test_inbox_lists_pending_with_chips_and_count(client, oncall, proposal):
    make_proposal(number=4250, title="Second", body="Segmentation fault (core dumped)")
    client.force_login(oncall)
    response = client.get(reverse("inbox", args=["pt2"]))
    html = response.content.decode()
    assert "2 left" in html
    assert "+ module: dynamo" in html
    assert "+ triage review" in html


def test_inbox_orders_newest_or_least_confident(client, oncall):
    low = make_proposal(number=5001, title="Vague", body="It is broken, please help")
    high = make_proposal(
        number=5002,
        title="[Inductor][CPU] layernorm fails",
        body=(
            "works with aot_eager, fails with inductor, only on CPU\n```python\nimport torch\n```"
        ),
    )
    assert low.score < high.score
    client.force_login(oncall)
    newest = client.get(reverse("inbox", args=["pt2"])).context["proposals"]
    confidence = client.get(reverse("inbox", args=["pt2"]) + "?order=confidence").context[
        "proposals"
    ]
    assert [p.pk for p in newest] == [high.pk, low.pk]
    assert [p.pk for p in confidence] == [low.pk, high.pk]


def test_a_done_queue_is_empty(client, oncall):
    client.force_login(oncall)
    html = client.get(reverse("inbox", args=["distributed"])).content.decode()
    assert "Nothing left to triage" in html
    assert "0 left" in html


def test_issue_page_shows_the_proposal_card(client, oncall):
    proposal = make_proposal(
        number=6001,
        title="Graph break",
        body="```\ntorch._dynamo.exc.Unsupported: call_method\n```",
        comments=["cc @someone"],
    )
    client.force_login(oncall)
    html = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    assert "+ module: dynamo" in html
    assert "component-isolation" in html  # the cited section id
    assert "Name the component precisely" in html  # and its title
    assert "<mark>Graph break</mark>" in html  # the quoted evidence, marked in its context
    assert escape(proposal.rationale) in html
    assert f"{proposal.tier}</span>" in html
    assert "Ask for a self-contained reproducer" in html or proposal.comment_template in html


def decide(client, proposal, **data):
    return client.post(reverse("decide", args=[proposal.pk]) + "?order=newest", data)


def test_accept_records_the_proposal_and_queues_the_write(client, oncall, proposal):
    nxt = make_proposal(number=4000)
    client.force_login(oncall)
    response = decide(client, proposal, kind="accept")

    decision = Decision.objects.get()
    assert response.status_code == 302
    assert (
        response["Location"]
        == reverse("proposal", args=[nxt.pk]) + f"?order=newest&after={decision.pk}"
    )
    assert decision.kind == "accept"
    assert decision.add_labels == proposal.add_labels
    assert decision.comment_body == proposal.comment_body
    assert decision.write.state == Write.State.QUEUED


def test_edit_uses_the_reviewers_labels_and_comment(client, oncall, proposal):
    client.force_login(oncall)
    decide(
        client,
        proposal,
        kind="edit",
        add=["module: dynamic shapes", "", "module: inductor"],
        remove=[],
        comment="",
        note="it is dynamic shapes",
    )
    decision = Decision.objects.get()
    assert decision.add_labels == ["module: dynamic shapes", "module: inductor"]
    assert decision.comment_body == ""
    assert decision.diff()["dropped_by_human"] == sorted(proposal.add_labels)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"add": ["high priority"]}, "triage-review meeting"),
        ({"add": ["module: docs"]}, "not in the PT2 vocabulary"),
        ({"remove": ["module: docs"]}, "not on the issue"),
    ],
)
def test_edit_rejects_labels_outside_policy(client, oncall, proposal, data, error):
    client.force_login(oncall)
    response = decide(client, proposal, kind="edit", **data)
    assert response.status_code == 422
    assert error in response.content.decode()
    assert not Decision.objects.exists()


def test_escalate_adds_triage_review_and_keeps_the_note(client, oncall, proposal):
    client.force_login(oncall)
    decide(client, proposal, kind="escalate", note="Hits a popular HF model")
    decision = Decision.objects.get()
    assert decision.kind == "escalate"
    assert "triage review" in decision.add_labels
    assert decision.note == "Hits a popular HF model"


def test_escalate_and_reject_need_a_note(client, oncall, proposal):
    client.force_login(oncall)
    assert decide(client, proposal, kind="escalate", note="  ").status_code == 422
    assert decide(client, proposal, kind="reject").status_code == 422
    assert not Decision.objects.exists()


def test_reject_writes_nothing(client, oncall, proposal):
    client.force_login(oncall)
    decide(client, proposal, kind="reject", note="this is a dynamic shapes bug")
    decision = Decision.objects.get()
    assert decision.kind == "reject"
    assert not Write.objects.exists()


def test_a_second_decision_on_the_same_proposal_is_refused(client, oncall, proposal):
    client.force_login(oncall)
    decide(client, proposal, kind="accept")
    response = decide(client, proposal, kind="accept")
    assert response.status_code == 409
    assert Decision.objects.count() == 1


def test_the_last_decision_returns_to_the_empty_inbox(client, oncall, proposal):
    client.force_login(oncall)
    response = decide(client, proposal, kind="accept")
    decision = Decision.objects.get()
    assert (
        response["Location"]
        == reverse("inbox", args=["pt2"]) + f"?order=newest&after={decision.pk}"
    )


def test_htmx_decision_answers_with_the_next_issue_and_pushes_its_url(client, oncall, proposal):
    nxt = make_proposal(number=4000, title="The next one")
    client.force_login(oncall)
    response = client.post(
        reverse("decide", args=[proposal.pk]) + "?order=newest",
        {"kind": "accept"},
        headers={"HX-Request": "true", "HX-Boosted": "true"},
    )
    assert response.status_code == 200
    assert response["HX-Push-Url"].startswith(reverse("proposal", args=[nxt.pk]))
    html = response.content.decode()
    assert "The next one" in html
    assert f'id="decision-{Decision.objects.get().pk}"' in html


def test_write_status_partial_polls_until_settled(client, oncall, proposal):
    client.force_login(oncall)
    decide(client, proposal, kind="accept")
    write = Write.objects.get()
    html = client.get(
        reverse("write-status", args=[write.pk]), headers={"HX-Request": "true"}
    ).content.decode()
    assert 'hx-trigger="every 1s"' in html
    Write.objects.filter(pk=write.pk).update(
        state=Write.State.APPLIED,
        sent={"added": ["module: dynamo"], "removed": [], "comment_id": 7},
    )
    html = client.get(reverse("write-status", args=[write.pk])).content.decode()
    assert "hx-trigger" not in html
    assert "Applied on GitHub" in html
    assert "Comment 7 posted" in html


def test_failed_write_shows_the_reason_and_retries(client, oncall, decided_write, standin):
    client.force_login(oncall)
    html = client.get(reverse("write-status", args=[decided_write.pk])).content.decode()
    assert "Failed: GitHub refused (404)" in html
    assert reverse("retry-write", args=[decided_write.pk]) in html
    client.post(reverse("retry-write", args=[decided_write.pk]), headers={"HX-Request": "true"})
    decided_write.refresh_from_db()
    assert decided_write.state == Write.State.QUEUED


def test_history_shows_proposals_decisions_and_the_difference(client, oncall, proposal):
    client.force_login(oncall)
    decide(
        client, proposal, kind="edit", add=["module: inductor"], comment="", note="inductor, really"
    )
    html = client.get(reverse("history", args=[proposal.issue_id])).content.decode()
    assert proposal.rubric_version in html
    assert "rules v1" in html
    assert "human added module: inductor" in html
    assert "human dropped module: dynamo" in html
    assert "inductor, really" in html


def test_exports_carry_every_decision(client, oncall, proposal):
    client.force_login(oncall)
    decide(client, proposal, kind="escalate", note="crash in HF model")
    rejected = make_proposal(number=4243)
    decide(client, rejected, kind="reject", note="not a bug")
    body = b"".join(client.get("/decisions.jsonl").streaming_content).decode()
    rows = [json.loads(line) for line in body.splitlines()]
    assert len(rows) == 2
    escalated = Decision.objects.get(proposal=proposal)
    assert rows[0] == rows[0] | {
        "decision_id": escalated.pk,
        "decided_at": escalated.decided_at.isoformat(),
        "decided_by": "oncall",
        "kind": "escalate",
        "queue": "pt2",
        "repository": proposal.issue.repository,
        "issue_number": 4242,
        "proposal_id": proposal.pk,
        "proposal_tier": proposal.tier,
        "proposed_add": proposal.add_labels,
        "note": "crash in HF model",
        "write_state": "queued",
    }
    assert "triage review" in rows[0]["approved_add"]
    # A rejection writes nothing.
    assert rows[1] | {"write_state": "", "write_sent": {}} == rows[1]
    assert rows[1]["kind"] == "reject"

    text = b"".join(client.get("/decisions.csv").streaming_content).decode()
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == 2
    assert table[0]["note"] == "crash in HF model"
    assert table[0]["write_state"] == "queued"
    assert table[1]["write_state"] == ""


def test_sync_button_enqueues_a_sync(client, oncall, standin):
    client.force_login(oncall)
    response = client.post(reverse("start-sync", args=["pt2"]), headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert 'id="sync-status"' in response.content.decode()


def test_demo_login_exists_only_in_demo_mode(client, settings):
    settings.TRIAGE_DEMO = False
    assert client.post(reverse("demo-login")).status_code == 404
    settings.TRIAGE_DEMO = True
    make_user("oncall", oncall=True).set_password("oncall")
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="oncall")
    user.set_password("oncall")
    user.save()
    assert client.post(reverse("demo-login")).status_code == 302
    assert client.get(reverse("home")).status_code == 200


def test_csrf_holds_on_htmx_posts(oncall, proposal):
    client = Client(enforce_csrf_checks=True)
    client.force_login(oncall)
    url = reverse("decide", args=[proposal.pk])
    headers = {"HX-Request": "true"}
    assert client.post(url, {"kind": "accept"}, headers=headers).status_code == 403

    page = client.get(reverse("proposal", args=[proposal.pk]))
    token = page.cookies["csrftoken"].value
    assert '"X-CSRFToken"' in page.content.decode()  # hx-headers on <body> carries it
    response = client.post(url, {"kind": "accept"}, headers=headers | {"X-CSRFToken": token})
    assert response.status_code == 200
    assert Decision.objects.count() == 1


def test_a_meeting_outcome_write_is_not_retried_from_the_decision_card(client, oncall):
    from triage.models import AgendaItem, Meeting

    issue = make_proposal(number=9100).issue
    item = AgendaItem.objects.create(meeting=Meeting.objects.create(date="2026-11-24"), issue=issue)
    write = Write.objects.create(outcome=item, state=Write.State.FAILED)
    client.force_login(oncall)
    assert client.post(reverse("retry-write", args=[write.pk])).status_code == 404
    write.refresh_from_db()
    assert write.state == Write.State.FAILED


def test_the_decisions_csv_cannot_smuggle_spreadsheet_formulas(client, oncall, proposal):
    client.force_login(oncall)
    decide(client, proposal, kind="reject", note='=HYPERLINK("https://evil.example")')
    text = b"".join(client.get("/decisions.csv").streaming_content).decode()
    (row,) = csv.DictReader(io.StringIO(text))
    assert row["note"] == '\'=HYPERLINK("https://evil.example")'


def test_the_inbox_title_is_plain_text(client, oncall):
    client.force_login(oncall)
    html = client.get(reverse("inbox", args=["pt2"])).content.decode()
    title = html[html.index("<title>") : html.index("</title>")]
    assert title == "<title>PT2 · Triage Console"


def test_label_lists_in_the_decisions_csv_cannot_smuggle_formulas(client, oncall, proposal):
    # A label is named by whoever can create labels on GitHub: the first one starts the cell.
    outbox.decide(
        proposal,
        kind="accept",
        user=oncall,
        add_labels=['=HYPERLINK("https://evil.example")', "module: dynamo"],
        remove_labels=["-1+2"],
        comment_body="",
        close=False,
        note="",
    )
    client.force_login(oncall)
    text = b"".join(client.get("/decisions.csv").streaming_content).decode()
    (row,) = csv.DictReader(io.StringIO(text))
    assert row["approved_add"] == '\'=HYPERLINK("https://evil.example"); module: dynamo'
    assert row["approved_remove"] == "'-1+2"


def test_a_queue_that_may_not_close_refuses_a_closing_decision(client, oncall, proposal):
    client.force_login(oncall)
    response = decide(client, proposal, kind="edit", add=["module: dynamo"], close="on")
    assert response.status_code == 422
    assert "does not close issues" in response.content.decode()
    assert not proposal.decisions.exists()


def test_the_second_oncall_sees_who_decided_and_what(client, oncall, proposal):
    alice = make_user("alice", oncall=True)
    outbox.decide(
        proposal,
        kind="edit",
        user=alice,
        add_labels=["module: inductor"],
        remove_labels=[],
        comment_body="",
        close=False,
        note="",
    )
    client.force_login(oncall)
    response = decide(client, proposal, kind="accept")
    assert response.status_code == 409
    text = response.content.decode()
    assert "Already decided: alice edited it at " in text and "(+module: inductor)" in text


@pytest.mark.django_db(transaction=True)
def test_two_oncalls_deciding_at_the_same_moment_make_one_decision(transactional_db):
    import threading

    from django.db import connection

    ensure_default_queues()  # a transactional test starts from an emptied database
    users = [make_user("first", oncall=True), make_user("second", oncall=True)]
    for round_ in range(50):
        proposal = make_proposal(number=9000 + round_)
        start = threading.Barrier(2)
        made: list[object] = []

        def decide_as(user, proposal=proposal, start=start, made=made) -> None:
            try:
                start.wait(timeout=5)
                made.append(
                    outbox.decide(
                        proposal,
                        kind="accept",
                        user=user,
                        add_labels=list(proposal.add_labels),
                        remove_labels=[],
                        comment_body="",
                        close=False,
                        note="",
                    )
                )
            finally:
                connection.close()

        threads = [threading.Thread(target=decide_as, args=(user,)) for user in users]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert len([m for m in made if m is not None]) == 1, round_
        assert proposal.decisions.count() == 1
        assert Write.objects.filter(decision__proposal=proposal).count() == 1


def test_a_decision_posted_after_the_session_ended_is_filled_in_again_after_login(client, proposal):
    from django.contrib.auth import get_user_model

    user = make_user("returning", oncall=True)
    user.set_password("pw-returning")
    user.save()
    data = {
        "kind": "edit",
        "add": ["module: dynamo", "module: inductor"],
        "comment": "Could you try aot_eager?",
        "note": "typed before lunch",
    }
    # The session ended while the form was open: the POST arrives anonymous.
    response = client.post(reverse("decide", args=[proposal.pk]), data)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert not proposal.decisions.exists()

    response = client.post(
        response["Location"], {"username": "returning", "password": "pw-returning"}, follow=True
    )

    assert response.status_code == 200
    assert response.redirect_chain[-1][0].startswith(reverse("proposal", args=[proposal.pk]))
    html = response.content.decode()
    assert "You were signed out before your edit was saved" in html
    assert '<details id="edit-panel" open>' in html
    assert 'value="module: inductor"' in html
    assert "Could you try aot_eager?</textarea>" in html and 'value="typed before lunch"' in html
    assert get_user_model().objects.get(username="returning").decision_set.count() == 0


@pytest.mark.parametrize("model", ["proposal", "decision", "write"])
def test_records_are_read_only_in_the_admin(admin_client, model):
    assert admin_client.get(reverse(f"admin:triage_{model}_add")).status_code == 403
    listing = admin_client.get(reverse(f"admin:triage_{model}_changelist")).content.decode()
    assert f"/admin/triage/{model}/add/" not in listing


def test_comments_show_their_date_and_link_references(client, oncall):
    from tests.factories import make_proposal

    client.force_login(oncall)
    proposal = make_proposal(number=321, comments=["Same as #77, bisected to 9f2a1c3e4b."])
    body = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    comment = body[body.index('class="comment"') :]
    assert '<time datetime="' in comment
    assert 'href="https://github.com/pytorch/pytorch/issues/77"' in comment
    assert 'href="https://github.com/pytorch/pytorch/commit/9f2a1c3e4b"' in comment


def test_an_issue_changed_since_its_proposal_says_what_changed(client, oncall):
    from tests.factories import make_proposal

    client.force_login(oncall)
    proposal = make_proposal(number=331)
    issue = proposal.issue
    issue.labels = [*issue.labels, "module: dynamo"]
    issue.save()
    body = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    notice = body[body.index('id="changed-since"') :].split("</p>")[0]
    assert "+ module: dynamo" in notice
    assert "its text or comments" not in notice

    issue.body = "Now it segfaults."
    issue.save()
    body = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    assert "its text or comments" in body


def test_an_issue_in_two_queues_links_the_other_proposal(client, oncall):
    from tests.factories import make_proposal, queue
    from triage.proposing import propose

    client.force_login(oncall)
    pt2 = make_proposal(number=332, labels=["oncall: pt2", "oncall: distributed"])
    other = propose(pt2.issue, queue("distributed"))
    assert other is not None
    body = client.get(reverse("proposal", args=[pt2.pk])).content.decode()
    assert f'href="{reverse("proposal", args=[other.pk])}"' in body
    assert "Distributed queue" in body or "distributed queue" in body.lower()


def test_a_proposal_decided_by_someone_else_says_who_and_when(client, oncall):
    from tests.factories import make_proposal, make_user
    from triage import outbox

    proposal = make_proposal(number=333)
    alice = make_user("alice", oncall=True)
    outbox.decide(
        proposal,
        kind="reject",
        user=alice,
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="a duplicate",
    )
    client.force_login(oncall)
    body = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    notice = body[body.index('id="decided-by-another"') :].split("</p>")[0]
    assert "alice rejected this" in notice
    client.force_login(alice)
    assert (
        b'id="decided-by-another"'
        not in client.get(reverse("proposal", args=[proposal.pk])).content
    )
