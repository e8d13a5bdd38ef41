from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from django.urls import reverse

from tests.factories import make_proposal, make_user
from triage import presence

pytestmark = pytest.mark.django_db


def test_the_issue_page_and_the_inbox_show_who_else_has_an_issue_open(client, oncall):
    proposal = make_proposal(number=601)
    alice = make_user("alice", oncall=True)
    client.force_login(alice)
    client.get(reverse("proposal", args=[proposal.pk]))

    client.force_login(oncall)
    body = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    assert "Also open: <strong>alice</strong>" in body
    inbox = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert "👀 alice" in inbox
    # Nobody sees themselves.
    client.force_login(alice)
    ping = client.get(reverse("presence", args=[proposal.pk])).content.decode()
    assert "oncall" in ping and "alice" not in ping


def test_a_name_goes_once_its_page_stops_saying_it_is_open():
    cache.set("presence:7", {"alice": time.time() - presence.SECONDS - 1, "bob": time.time()})
    assert presence.others([7], "carol") == {7: ["bob"]}


def test_the_inbox_follows_the_page_it_shows_after_a_decision(client, oncall):
    first = make_proposal(number=602)
    client.force_login(oncall)
    response = client.post(
        reverse("decide", args=[first.pk]) + "?order=confidence",
        {"kind": "reject", "note": "no"},
        headers={"HX-Request": "true"},
    )
    body = response.content.decode()
    # Nothing else is pending: the inbox is the answer, and it polls the inbox, not the POST.
    assert 'hx-get="/q/pt2/?order=confidence" hx-trigger="every 15s"' in body  # the default
