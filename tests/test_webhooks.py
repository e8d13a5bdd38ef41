"""GitHub pushes, the console listens: signed deliveries only, each taken once."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid

import pytest
from django.urls import reverse

from tests.conftest import REPO
from tests.factories import ensure_default_queues, make_issue, raw_issue
from triage.models import Issue, Proposal

SECRET = "webhook-test-secret"
URL = "/github/webhook/"


@pytest.fixture(autouse=True)
def webhook_secret(settings):
    settings.GITHUB_WEBHOOK_SECRET = SECRET


def signed(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(client, payload, *, event="issues", signature=None, delivery=None, body=None):
    body = body if body is not None else json.dumps(payload).encode()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature if signature is not None else signed(body),
    }
    return client.post(URL, data=body, content_type="application/json", headers=headers)


def issue_event(number: int, repo: str = REPO) -> dict[str, object]:
    return {"action": "labeled", "issue": {"number": number}, "repository": {"full_name": repo}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("signature", "status"),
    [("", 403), ("sha256=" + "0" * 64, 403), ("sha1=abc", 403)],
)
def test_an_unsigned_or_wrongly_signed_delivery_is_refused(client, signature, status):
    response = deliver(client, issue_event(1), signature=signature)
    assert response.status_code == status


@pytest.mark.django_db
def test_without_a_secret_every_delivery_is_refused(client, settings):
    settings.GITHUB_WEBHOOK_SECRET = ""
    assert deliver(client, issue_event(1), signature=signed(b"x", "")).status_code == 403


@pytest.mark.django_db
def test_a_replayed_delivery_is_refused(client, standin):
    standin.add_issue(REPO, raw_issue(5))
    delivery = str(uuid.uuid4())
    assert deliver(client, issue_event(5), delivery=delivery).status_code == 204
    assert deliver(client, issue_event(5), delivery=delivery).status_code == 400


@pytest.mark.django_db
def test_an_oversized_delivery_is_refused_before_it_is_read(client, settings):
    settings.GITHUB_WEBHOOK_MAX_BYTES = 100
    body = json.dumps(issue_event(1) | {"padding": "x" * 200}).encode()
    assert deliver(client, None, body=body).status_code == 400


@pytest.mark.django_db
def test_events_it_does_not_take_are_refused_and_a_ping_is_answered(client):
    assert deliver(client, {"zen": "hi"}, event="ping").status_code == 204
    assert deliver(client, issue_event(1), event="push").status_code == 400
    assert deliver(client, {"no": "issue"}, event="issues").status_code == 400


@pytest.mark.django_db
def test_a_signed_issue_event_rereads_the_issue_and_proposes(
    client, standin, django_capture_on_commit_callbacks
):
    # The delivery's own text is not believed: the issue is read from GitHub.
    standin.add_issue(REPO, raw_issue(42, labels=["oncall: pt2"]))
    with django_capture_on_commit_callbacks(execute=True):
        response = deliver(client, issue_event(42) | {"issue": {"number": 42, "title": "lies"}})

    assert response.status_code == 204
    issue = Issue.objects.get(number=42)
    assert issue.title != "lies"
    assert Proposal.objects.filter(issue=issue, status=Proposal.Status.PENDING).exists()


@pytest.mark.django_db
def test_a_delivery_for_a_repository_no_queue_watches_is_taken_and_ignored(client, standin):
    response = deliver(client, issue_event(1, repo="someone/else"))
    assert response.status_code == 204
    assert not Issue.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_standin_pushes_a_human_change_to_the_console_end_to_end(live_server, standin):
    ensure_default_queues()
    standin.add_issue(REPO, raw_issue(77, labels=["oncall: pt2"]))
    issue = make_issue(number=77, labels=["oncall: pt2"])
    standin.send_webhooks(live_server.url + reverse("github-webhook"), SECRET)

    # Someone triages the issue on github.com.
    standin.set_labels(REPO, 77, ["oncall: pt2", "module: dynamo", "triaged"])

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        issue.refresh_from_db()
        # The stand-in records the delivery once the console has answered, which may be a
        # little after the console stored the labels (the request's tasks run in it here).
        if "triaged" in issue.labels and standin.deliveries:
            break
        time.sleep(0.05)
    assert issue.labels == ["module: dynamo", "oncall: pt2", "triaged"]
    assert [d["status"] for d in standin.deliveries] == [204]
