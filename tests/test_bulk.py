from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_proposal, make_user
from triage import outbox
from triage.models import Decision, Proposal, Write

pytestmark = pytest.mark.django_db

SEGFAULT = "Segmentation fault (core dumped)\n```python\nimport torch\n```"


@pytest.fixture
def three():
    return [make_proposal(number=n) for n in (701, 702, 703)]


def test_the_preview_shows_every_change_that_would_be_written(client, oncall, three):
    client.force_login(oncall)
    response = client.get(reverse("bulk-preview", args=["pt2"]), {"p": [three[0].pk, three[2].pk]})
    assert response.status_code == 200
    assert {p.pk for p in response.context["chosen"]} == {three[0].pk, three[2].pk}
    body = response.content.decode()
    for label in three[0].add_labels:
        assert f"+ {label}" in body
    assert "Accept these 2" in body
    assert not Decision.objects.exists()


def test_accepting_makes_a_decision_and_a_write_each(client, oncall, three):
    client.force_login(oncall)
    response = client.post(reverse("bulk-accept", args=["pt2"]), {"p": [p.pk for p in three]})
    assert response.status_code == 302
    decisions = Decision.objects.filter(kind="accept").order_by("proposal_id")
    assert [d.proposal_id for d in decisions] == [p.pk for p in three]
    for decision, proposal in zip(decisions, three, strict=True):
        assert decision.add_labels == proposal.add_labels
        assert decision.write is not None
    assert Proposal.objects.filter(status="pending").count() == 0


def test_a_proposal_decided_meanwhile_is_left_as_it_was(client, oncall, three):
    alice = make_user("alice", oncall=True)
    outbox.decide(
        three[1],
        kind="reject",
        user=alice,
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="no",
    )
    client.force_login(oncall)
    client.post(reverse("bulk-accept", args=["pt2"]), {"p": [p.pk for p in three]})
    assert Decision.objects.filter(kind="accept").count() == 2
    assert Decision.objects.get(proposal=three[1]).kind == "reject"


def test_every_high_confidence_one_the_inbox_shows(client, oncall, three):
    Proposal.objects.filter(pk=three[0].pk).update(tier="high")
    client.force_login(oncall)
    response = client.get(reverse("bulk-preview", args=["pt2"]), {"high": "on"})
    assert [p.pk for p in response.context["chosen"]] == [three[0].pk]


def test_one_undo_withdraws_the_whole_batch(client, oncall, three, settings):
    settings.TRIAGE_UNDO_SECONDS = 60
    client.force_login(oncall)
    client.post(reverse("bulk-accept", args=["pt2"]), {"p": [p.pk for p in three]})
    inbox = client.get(reverse("inbox", args=["pt2"]))
    assert b'id="bulk-undo"' in inbox.content
    assert len(inbox.context["bulk_undo"]) == 3

    client.post(reverse("bulk-undo", args=["pt2"]))

    assert set(Write.objects.values_list("state", flat=True)) == {"withdrawn"}
    assert Proposal.objects.filter(status="pending").count() == 3
    assert b'id="bulk-undo"' not in client.get(reverse("inbox", args=["pt2"])).content


def test_only_oncalls_accept_in_bulk(client, viewer, three):
    client.force_login(viewer)
    assert (
        client.get(reverse("bulk-preview", args=["pt2"]), {"p": [three[0].pk]}).status_code == 403
    )
    assert (
        client.post(reverse("bulk-accept", args=["pt2"]), {"p": [three[0].pk]}).status_code == 403
    )
    assert not Decision.objects.exists()


@pytest.mark.parametrize("params", [{}, {"p": ["x"]}, {"p": [str(n) for n in range(1, 502)]}])
def test_a_bad_selection_is_a_bad_request(client, oncall, three, params):
    client.force_login(oncall)
    assert client.get(reverse("bulk-preview", args=["pt2"]), params).status_code == 400


def test_another_queues_proposal_is_not_accepted_here(client, oncall, three):
    other = make_proposal(number=704, labels=["oncall: distributed"], slug="distributed")
    client.force_login(oncall)
    client.post(reverse("bulk-accept", args=["pt2"]), {"p": [other.pk, three[0].pk]})
    assert list(Decision.objects.values_list("proposal_id", flat=True)) == [three[0].pk]
