"""Every role against every deciding view and every read-only page.

The queue under test is pt2. Its deciders: the members of its GitHub team (as last checked),
of the group set on it in the admin, and superusers. "Decider elsewhere" decides in the
distributed queue only: in pt2 it reads, like any member of the organisation and like staff
(who keep the admin). An outsider (made inactive when they left the organisation) and an
anonymous visitor are sent to log in.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from tests.factories import make_issue, make_proposal, make_user, queue
from triage import agenda, outbox
from triage.models import AgendaItem, Meeting, Proposal, Queue, TeamMembership, Write

PT2_TEAM = "pytorch/pt2-oncall"
DISTRIBUTED_TEAM = "pytorch/distributed-oncall"

ANONYMOUS, LOGIN, READ, DECIDE = "anonymous", "login", "read", "decide"

# role: what it may do in the pt2 queue, and whether it decides in some queue (the meeting).
ROLES = {
    "anonymous": (LOGIN, False),
    "outsider": (LOGIN, False),
    "org reader": (READ, False),
    "decider elsewhere": (READ, True),
    "team decider": (DECIDE, True),
    "admin-group decider": (DECIDE, True),
    "staff": (READ, False),
    "superuser": (DECIDE, True),
}


def github_user(username: str, **flags: bool):
    user = make_user(username, oncall=False)
    for flag, value in flags.items():
        setattr(user, flag, value)
    user.save()
    SocialAccount.objects.create(
        user=user, provider="github", uid=str(user.pk), extra_data={"login": username}
    )
    return user


def sign_in_as(client, role: str) -> None:
    if role == "anonymous":
        return
    if role == "outsider":
        user = github_user("gone", is_active=False)
    elif role == "org reader":
        user = github_user("reader")
    elif role == "decider elsewhere":
        user = github_user("elsewhere")
        TeamMembership.objects.create(user=user, team=DISTRIBUTED_TEAM)
    elif role == "team decider":
        user = github_user("teamed")
        TeamMembership.objects.create(user=user, team=PT2_TEAM)
    elif role == "admin-group decider":
        user = github_user("grouped")
        group = Group.objects.create(name="pt2 deciders")
        user.groups.add(group)
        Queue.objects.filter(slug="pt2").update(deciders=group)
    elif role == "staff":
        user = github_user("staffer", is_staff=True)
    else:
        user = github_user("root", is_staff=True, is_superuser=True)
    client.force_login(user)


@dataclass
class World:
    proposal: Proposal
    other: Proposal
    write: Write
    item: AgendaItem

    @property
    def day(self) -> str:
        return self.item.meeting.date.isoformat()


@pytest.fixture
def world(db, standin) -> World:
    for slug, team in (("pt2", PT2_TEAM), ("distributed", DISTRIBUTED_TEAM)):
        found = queue(slug)
        found.github_team = team
        found.save()
    author = make_user("earlier-oncall", oncall=True)
    decided = make_proposal("pt2")
    made = outbox.decide(
        decided,
        kind="accept",
        user=author,
        add_labels=list(decided.add_labels),
        remove_labels=list(decided.remove_labels),
        comment_body="",
        close=False,
        note="",
    )
    assert made is not None
    meeting = agenda.open_meeting(timezone.localdate())
    agenda.build(meeting)
    issue = make_issue(labels=["oncall: pt2", "triage review"])
    agenda.build(meeting)
    item = AgendaItem.objects.get(meeting=meeting, issue=issue)
    assert item.queue is not None and item.queue.slug == "pt2"
    return World(make_proposal("pt2"), make_proposal("pt2"), made.write, item)


# name: (method, url, data, status for a decider); the unknown objects' below.
def deciding_views(w: World) -> dict[str, tuple[str, str, dict[str, object], int]]:
    return {
        "decide": ("post", reverse("decide", args=[w.proposal.pk]), {"kind": "accept"}, 302),
        "bulk preview": ("get", reverse("bulk-preview", args=["pt2"]), {"p": w.proposal.pk}, 200),
        "bulk accept": ("post", reverse("bulk-accept", args=["pt2"]), {"p": w.proposal.pk}, 302),
        "bulk undo": ("post", reverse("bulk-undo", args=["pt2"]), {}, 302),
        "sync": ("post", reverse("start-sync", args=["pt2"]), {}, 302),
        "undo write": ("post", reverse("undo-write", args=[w.write.pk]), {}, 302),
        "retry write": ("post", reverse("retry-write", args=[w.write.pk]), {}, 302),
        "meeting outcome": (
            "post",
            reverse("agenda-outcome", args=[w.day, w.item.pk]),
            {"action": "retry"},
            302,
        ),
    }


UNKNOWN: dict[str, tuple[str, tuple[str, list[object]], dict[str, object]]] = {
    "decide": ("post", ("decide", [999_999]), {"kind": "accept"}),
    "bulk preview": ("get", ("bulk-preview", ["nope"]), {"p": 1}),
    "bulk accept": ("post", ("bulk-accept", ["nope"]), {"p": 1}),
    "bulk undo": ("post", ("bulk-undo", ["nope"]), {}),
    "sync": ("post", ("start-sync", ["nope"]), {}),
    "undo write": ("post", ("undo-write", [999_999]), {}),
    "retry write": ("post", ("retry-write", [999_999]), {}),
    "meeting outcome": ("post", ("agenda-outcome", ["2026-01-05", 999_999]), {"action": "retry"}),
}


def request(client, method: str, url: str, data: dict[str, object]):
    return getattr(client, method)(url, data)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("view", list(UNKNOWN))
def test_deciding_views_answer_each_role(client, world, role, view):
    method, url, data, allowed = deciding_views(world)[view]
    sign_in_as(client, role)
    response = request(client, method, url, data)
    access, _ = ROLES[role]
    if access == LOGIN:
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    elif access == READ:
        assert response.status_code == 403
    else:
        assert response.status_code == allowed, response.content[:300]


@pytest.mark.parametrize("role", [role for role, (access, _) in ROLES.items() if access != LOGIN])
@pytest.mark.parametrize("view", list(UNKNOWN))
def test_deciding_views_answer_404_for_unknown_objects(client, world, role, view):
    method, (name, args), data = UNKNOWN[view]
    sign_in_as(client, role)
    assert request(client, method, reverse(name, args=args), data).status_code == 404


def test_a_reader_changes_nothing(client, world):
    sign_in_as(client, "decider elsewhere")
    for method, url, data, _ in deciding_views(world).values():
        request(client, method, url, data)
    world.proposal.refresh_from_db()
    world.write.refresh_from_db()
    world.item.refresh_from_db()
    assert world.proposal.status == Proposal.Status.PENDING
    assert world.write.state == Write.State.QUEUED
    assert world.item.status == AgendaItem.Status.OPEN


@pytest.mark.parametrize("role", ROLES)
def test_the_meeting_is_run_by_whoever_decides_somewhere(client, world, role):
    sign_in_as(client, role)
    refreshed = client.post(reverse("meeting-refresh", args=[world.day]))
    opened = client.post(reverse("meetings"), {"date": "2026-12-01", "confirm": "yes"})
    access, somewhere = ROLES[role]
    if access == LOGIN:
        assert refreshed.status_code == opened.status_code == 302
        assert refreshed["Location"].startswith(reverse("login"))
    elif somewhere:
        assert refreshed.status_code == opened.status_code == 302
        assert Meeting.objects.filter(date="2026-12-01").exists()
    else:
        assert refreshed.status_code == opened.status_code == 403


def read_only_pages(w: World) -> dict[str, str]:
    issue = w.proposal.issue
    return {
        "home": reverse("home") + "?all",
        "inbox": reverse("inbox", args=["pt2"]),
        "decided": reverse("decided", args=["pt2"]),
        "issue": reverse("proposal", args=[w.proposal.pk]),
        "history": reverse("history", args=[issue.pk]),
        "write status": reverse("write-status", args=[w.write.pk]),
        "sync status": reverse("sync-status", args=["pt2"]),
        "rotation": reverse("rotation", args=["pt2"]),
        "meetings": reverse("meetings"),
        "meeting": reverse("meeting", args=[w.day]),
        "report": reverse("report", args=["pt2"]),
        "rubric": reverse("rubric", args=["pt2"]),
        "export": reverse("export-decisions", args=["csv"]),
    }


@pytest.mark.parametrize("role", ROLES)
def test_read_only_pages_render_for_everyone_signed_in(client, world, role):
    sign_in_as(client, role)
    access, _ = ROLES[role]
    for name, url in read_only_pages(world).items():
        response = client.get(url)
        if access == LOGIN:
            assert response.status_code == 302, name
        else:
            assert response.status_code == 200, (name, response.status_code)


@pytest.mark.parametrize("role", [role for role, (access, _) in ROLES.items() if access != LOGIN])
def test_decide_controls_show_only_where_the_user_decides(client, world, role):
    sign_in_as(client, role)
    decides = ROLES[role][0] == DECIDE
    issue = client.get(reverse("proposal", args=[world.proposal.pk])).content.decode()
    assert (reverse("decide", args=[world.proposal.pk]) in issue) is decides
    inbox = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert ('form="bulk-form"' in inbox) is decides
    assert (reverse("start-sync", args=["pt2"]) in inbox) is decides
    card = client.get(reverse("write-status", args=[world.write.pk])).content.decode()
    assert (reverse("undo-write", args=[world.write.pk]) in card) is (
        decides and world.write.undo_seconds_left > 0
    )
    meeting = client.get(reverse("meeting", args=[world.day])).content.decode()
    assert (
        f'action="{reverse("agenda-outcome", args=[world.day, world.item.pk])}"' in meeting
    ) is (decides)


def test_staff_keep_the_admin_and_readers_do_not_get_it(client, world):
    sign_in_as(client, "staff")
    assert client.get(reverse("admin:index")).status_code == 200
    client.logout()
    sign_in_as(client, "org reader")
    assert client.get(reverse("admin:index")).status_code == 302
    client.logout()
    sign_in_as(client, "superuser")
    queue_page = client.get(reverse("admin:triage_queue_change", args=[queue("pt2").pk]))
    assert b'name="github_team"' in queue_page.content
    assert b'name="deciders"' in queue_page.content
