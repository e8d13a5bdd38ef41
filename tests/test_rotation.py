from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from allauth.socialaccount.models import SocialAccount
from django.urls import reverse
from django.utils import timezone

from tests.factories import make_proposal, make_user, queue
from triage import outbox, rotation
from triage.models import Decision, Issue, RotationWeek

pytestmark = pytest.mark.django_db


def test_weeks_start_on_monday_in_the_rotation_time_zone(settings):
    sunday_night_utc = datetime(2026, 11, 22, 20, 30, tzinfo=UTC)  # a Sunday
    settings.TRIAGE_ROTATION_TIME_ZONE = "UTC"
    assert rotation.week_of(sunday_night_utc) == date(2026, 11, 16)
    # In Tokyo it is already Monday morning: the next week has begun.
    settings.TRIAGE_ROTATION_TIME_ZONE = "Asia/Tokyo"
    assert rotation.week_of(sunday_night_utc) == date(2026, 11, 23)
    # In California it is Sunday afternoon still.
    settings.TRIAGE_ROTATION_TIME_ZONE = "America/Los_Angeles"
    assert rotation.week_of(sunday_night_utc) == date(2026, 11, 16)
    began = rotation.week_began(date(2026, 11, 23))
    assert began.utcoffset() == timedelta(hours=-8)


def test_round_robin_and_swap():
    pt2 = queue("pt2")
    alice, bob, carol = (make_user(name, oncall=True) for name in ("alice", "bob", "carol"))
    first = date(2026, 11, 25)  # a Wednesday: the rotation takes its Monday
    rotation.round_robin(pt2, [alice, bob, carol], first, 5)

    weeks = list(RotationWeek.objects.filter(queue=pt2).order_by("week_start"))
    assert [w.week_start for w in weeks] == [
        date(2026, 11, 23) + timedelta(weeks=n) for n in range(5)
    ]
    assert [w.oncall.username for w in weeks] == ["alice", "bob", "carol", "alice", "bob"]

    rotation.swap(pt2, date(2026, 11, 23), date(2026, 12, 7))
    names = list(
        RotationWeek.objects.filter(queue=pt2)
        .order_by("week_start")
        .values_list("oncall__username", flat=True)
    )
    assert names == ["carol", "bob", "alice", "alice", "bob"]
    with pytest.raises(ValueError, match="both weeks"):
        rotation.swap(pt2, date(2026, 11, 23), date(2027, 6, 7))


def this_week_is(user, slug="pt2", offset=0):
    return RotationWeek.objects.create(
        queue=queue(slug), week_start=rotation.current_week() + timedelta(weeks=offset), oncall=user
    )


def test_an_oncall_lands_on_their_own_queue(client):
    dana = make_user("dana", oncall=True)
    this_week_is(dana, "distributed")
    client.force_login(dana)
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"] == reverse("inbox", args=["distributed"])
    assert client.get(reverse("home") + "?all").status_code == 200


def test_the_handoff_note_is_shown_once_to_the_incoming_oncall_only(client):
    outgoing, incoming, other = (make_user(n, oncall=True) for n in ("out", "in", "other"))
    last_week = this_week_is(outgoing, offset=-1)
    last_week.handoff_note = "Waiting on the reporter of #123 for a repro."
    last_week.save()
    this_week_is(incoming)
    inbox = reverse("inbox", args=["pt2"])

    client.force_login(other)
    assert "Waiting on the reporter" not in client.get(inbox).content.decode()
    client.force_login(outgoing)
    assert "Waiting on the reporter" not in client.get(inbox).content.decode()

    client.force_login(incoming)
    first = client.get(inbox).content.decode()
    assert 'id="handoff"' in first and "Waiting on the reporter of #123" in first
    second = client.get(inbox).content.decode()
    assert 'id="handoff"' not in second


def test_the_week_s_oncall_writes_the_handoff_note(client):
    mine = make_user("mine", oncall=True)
    week = this_week_is(mine)
    client.force_login(mine)
    client.post(reverse("rotation-handoff", args=["pt2"]), {"note": "  #77 needs a ping  "})
    week.refresh_from_db()
    assert week.handoff_note == "#77 needs a ping"
    assert week.handoff_written_at is not None

    client.force_login(make_user("not-mine", oncall=True))
    assert client.post(reverse("rotation-handoff", args=["pt2"]), {"note": "x"}).status_code == 403


def test_undecided_issues_from_the_old_week_are_carried_over(client):
    oncall = make_user("oncall", oncall=True)
    this_week_is(oncall)
    began = rotation.week_began(rotation.current_week())
    old = make_proposal(number=1, title="From last week")
    new = make_proposal(number=2, title="From this week")
    Issue.objects.filter(pk=old.issue_id).update(created_at=began - timedelta(days=2))
    Issue.objects.filter(pk=new.issue_id).update(created_at=began + timedelta(minutes=1))

    assert rotation.carried_over(
        [*type(old).objects.select_related("issue").filter(pk__in=[old.pk, new.pk])]
    ) == {old.pk}
    client.force_login(oncall)
    page = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert 'id="carried-over"' in page and "1 issue arrived before your week" in page
    assert page.count("carried over</span>") == 1
    # A viewer sees the marker but is not reminded: it is not their week.
    client.force_login(make_user("viewer", oncall=False))
    page = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert 'id="carried-over"' not in page
    assert page.count("carried over</span>") == 1


def test_issues_waiting_too_long_are_marked_stale(client):
    pt2 = queue("pt2")
    pt2.stale_after_hours = 24
    pt2.save()
    waiting = make_proposal(number=1)
    make_proposal(number=2)
    Issue.objects.filter(pk=waiting.issue_id).update(
        created_at=timezone.now() - timedelta(hours=30)
    )
    Issue.objects.exclude(pk=waiting.issue_id).update(created_at=timezone.now())
    client.force_login(make_user("viewer", oncall=False))
    page = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert page.count('class="chip stale"') == 1


def test_week_stats_count_kinds_and_the_median_wait():
    alice = make_user("alice", oncall=True)
    this_week_is(alice)
    now = timezone.now()
    for number, kind, waited in [(1, "accept", 2), (2, "edit", 4), (3, "reject", 9)]:
        proposal = make_proposal(number=number)
        Issue.objects.filter(pk=proposal.issue_id).update(created_at=now - timedelta(hours=waited))
        decision = outbox.decide(
            proposal,
            kind=kind,
            user=alice,
            add_labels=[],
            remove_labels=[],
            comment_body="",
            close=False,
            note="why",
        )
        assert decision is not None
        Decision.objects.filter(pk=decision.pk).update(decided_at=now)

    (row,) = rotation.stats(queue("pt2"))
    assert row.week_start == rotation.current_week()
    assert (row.oncall, row.decided_by, row.decided) == ("alice", "alice", 3)
    assert dict(row.kinds) == {"accept": 1, "edit": 1, "reject": 1}
    assert row.median_hours == pytest.approx(4, abs=0.1)


def test_only_admins_plan_the_rotation(client):
    url = reverse("rotation-generate", args=["pt2"])
    data = {"people": "alice bob", "first_week": "2026-11-23", "weeks": "4"}
    make_user("alice", oncall=True)
    make_user("bob", oncall=True)
    client.force_login(make_user("oncall-not-admin", oncall=True))
    assert client.post(url, data).status_code == 403
    assert client.get(reverse("rotation", args=["pt2"])).status_code == 200

    admin = make_user("admin", oncall=False)
    admin.is_staff = True
    admin.save()
    client.force_login(admin)
    assert client.post(url, data).status_code == 302
    assert RotationWeek.objects.count() == 4
    client.post(
        reverse("rotation-swap", args=["pt2"]), {"first": "2026-11-23", "second": "2026-11-30"}
    )
    assert list(
        RotationWeek.objects.order_by("week_start").values_list("oncall__username", flat=True)
    ) == ["bob", "alice", "alice", "bob"]
    client.post(reverse("rotation-assign", args=["pt2"]), {"week": "2026-12-14", "oncall": "alice"})
    assert RotationWeek.objects.get(week_start=date(2026, 12, 14)).oncall.username == "alice"
    page = client.get(reverse("rotation", args=["pt2"])).content.decode()
    assert 'id="schedule"' in page and 'id="week-stats"' in page


def test_bad_plans_are_refused_with_a_message(client):
    admin = make_user("admin", oncall=False)
    admin.is_staff = True
    admin.save()
    client.force_login(admin)
    response = client.post(
        reverse("rotation-generate", args=["pt2"]),
        {"people": "ghost", "first_week": "2026-11-23", "weeks": "4"},
        follow=True,
    )
    assert "List people&#x27;s GitHub handles" in response.content.decode()
    assert not RotationWeek.objects.exists()


def test_the_rotation_names_people_by_their_github_handle(client):
    """A GitHub account is named by its login (not the username allauth made unique), is
    planned by it, with or without @ and in any case; a password user by their username."""
    octo = make_user("octo-cat2", oncall=False)
    SocialAccount.objects.create(
        user=octo, provider="github", uid="583231", extra_data={"login": "Octo-Cat"}
    )
    make_user("alice", oncall=True)
    admin = make_user("admin", oncall=False)
    admin.is_staff = True
    admin.save()
    client.force_login(admin)
    this_week = rotation.current_week()
    client.post(
        reverse("rotation-generate", args=["pt2"]),
        {"people": "@octo-cat, alice", "first_week": this_week.isoformat(), "weeks": "2"},
    )
    assert list(
        RotationWeek.objects.order_by("week_start").values_list("oncall__username", flat=True)
    ) == ["octo-cat2", "alice"]
    outbox.decide(
        make_proposal(),
        kind="reject",
        user=octo,
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="not a bug",
    )
    page = client.get(reverse("rotation", args=["pt2"])).content.decode()
    assert "@Octo-Cat" in page and "@alice" in page
    stats = page.split('id="week-stats"')[1]
    assert stats.count("@Octo-Cat") == 2  # this week's oncall, and who decided
    assert "octo-cat2" not in page
    assert '<option value="Octo-Cat">' in page


def test_anonymous_users_see_no_rotation(client):
    assert client.get(reverse("rotation", args=["pt2"])).status_code == 302
    assert client.post(reverse("rotation-handoff", args=["pt2"])).status_code == 302


def test_an_issue_both_stale_and_carried_over_shows_one_marker(client):
    pt2 = queue("pt2")
    pt2.stale_after_hours = 24
    pt2.save()
    began = rotation.week_began(rotation.current_week())
    both = make_proposal(number=1)
    Issue.objects.filter(pk=both.issue_id).update(
        created_at=min(began, timezone.now()) - timedelta(days=3)
    )
    client.force_login(make_user("viewer", oncall=False))
    page = client.get(reverse("inbox", args=["pt2"])).content.decode()
    assert page.count('class="chip stale"') == 1
    assert 'title="Also carried over from an earlier week"' in page
    assert "carried over</span>" not in page
