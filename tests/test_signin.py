"""Sign in with GitHub, end to end against the stand-in: the browser's redirects are followed
by hand, allauth exchanges the code and asks about the user over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.factories import make_proposal, queue
from triage.models import TeamMembership
from triage.roles import may_decide
from triage.signin import membership
from triage.tasks import recheck_memberships

ORG = "pytorch"


@pytest.fixture
def github(standin, settings, db):
    """The stand-in as GitHub for signing in: an OAuth app, the pytorch organisation, and the
    pt2 queue decided by the team pytorch/pt2-oncall."""
    settings.GITHUB_WEB_URL = standin.url
    settings.GITHUB_ORG = ORG
    settings.GITHUB_TOKEN = "console-token"
    settings.SOCIALACCOUNT_PROVIDERS = {
        "github": {
            **settings.SOCIALACCOUNT_PROVIDERS["github"],
            "APPS": [{"client_id": standin.oauth_client_id, "secret": standin.oauth_client_secret}],
        }
    }
    pt2 = queue("pt2")
    pt2.github_team = "pytorch/PT2-Oncall"  # stored lower-cased: GitHub ignores the case
    pt2.save()
    return standin


def sign_in(client, standin, login: str | None):
    """Press "Sign in with GitHub", let GitHub's authorize page answer, come back."""
    standin.sign_in_as(login)
    started = client.post(reverse("github_login"))
    assert started.status_code == 302
    authorize = started["Location"]
    assert authorize.startswith(f"{standin.url}/login/oauth/authorize?")
    assert parse_qs(urlsplit(authorize).query)["scope"] == ["read:org"]
    answer = requests.get(authorize, allow_redirects=False, timeout=10)
    assert answer.status_code == 302
    back = urlsplit(answer.headers["Location"])
    assert back.path == reverse("github_callback")
    return client.get(f"{back.path}?{back.query}")


def test_login_page_offers_github_once_configured(client, github):
    page = client.get(reverse("login"))
    assert b'id="github-signin"' in page.content


def test_login_page_without_an_oauth_app_offers_passwords_only(client, db):
    page = client.get(reverse("login"))
    assert b"github-signin" not in page.content


def test_a_team_member_signs_in_and_decides_in_the_team_queue(client, github, db):
    github.add_member(ORG, "octo-oncall", teams=["pt2-oncall"])
    done = sign_in(client, github, "octo-oncall")
    assert done.status_code == 302 and done["Location"] == reverse("home")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    assert SocialAccount.objects.get(user=user).extra_data["login"] == "octo-oncall"
    assert list(TeamMembership.objects.filter(user=user).values_list("team", flat=True)) == [
        "pytorch/pt2-oncall"
    ]
    assert may_decide(user, queue("pt2"))
    assert not may_decide(user, queue("distributed"))
    proposal = make_proposal("pt2")
    page = client.get(reverse("proposal", args=[proposal.pk]))
    assert page.status_code == 200 and page.context["can_decide"]


def test_an_organisation_member_outside_the_team_signs_in_to_read(client, github, db):
    github.add_member(ORG, "octo-reader")
    done = sign_in(client, github, "octo-reader")
    assert done.status_code == 302
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    assert not TeamMembership.objects.filter(user=user).exists()
    proposal = make_proposal("pt2")
    assert client.get(reverse("proposal", args=[proposal.pk])).context["can_decide"] is False
    assert client.post(reverse("decide", args=[proposal.pk]), {"kind": "accept"}).status_code == 403


def test_a_code_is_good_once(client, github, db):
    github.add_member(ORG, "octo-oncall")
    github.sign_in_as("octo-oncall")
    started = client.post(reverse("github_login"))
    back = requests.get(started["Location"], allow_redirects=False, timeout=10).headers["Location"]
    assert client.get(back).status_code == 302
    client.logout()
    # The same callback again (a replayed or leaked URL): its state and its code are spent.
    replayed = client.get(back)
    assert replayed.status_code == 401
    assert b"Signing in with GitHub did not work" in replayed.content
    assert client.get(reverse("home")).status_code == 302


def test_an_outsider_is_refused_with_the_reason(client, github, db):
    refused = sign_in(client, github, "stranger")
    assert refused.status_code == 403
    assert b"@stranger is not a member of the pytorch organisation" in refused.content
    assert not get_user_model().objects.filter(socialaccount__isnull=False).exists()
    assert client.get(reverse("home")).status_code == 302  # still signed out


def test_declining_on_github_signs_nobody_in(client, github, db):
    declined = sign_in(client, github, None)
    assert declined["Location"] == reverse("socialaccount_login_cancelled")
    assert b"Sign-in cancelled" in client.get(declined["Location"]).content
    assert client.get(reverse("home")).status_code == 302


def test_github_down_at_sign_in_refuses_without_guessing(client, github, db):
    github.add_member(ORG, "octo-oncall", teams=["pt2-oncall"])
    github.inject("GET", r"^/orgs/", status=502)
    refused = sign_in(client, github, "octo-oncall")
    assert refused.status_code == 503
    assert b"Try again in a minute" in refused.content


def test_daily_recheck_takes_the_right_to_decide_away(client, github, db):
    github.add_member(ORG, "octo-oncall", teams=["pt2-oncall"])
    sign_in(client, github, "octo-oncall")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    assert may_decide(user, queue("pt2"))

    github.remove_from_team(ORG, "pt2-oncall", "octo-oncall")
    recheck_memberships.delay()
    assert not may_decide(user, queue("pt2"))
    proposal = make_proposal("pt2")
    assert client.post(reverse("decide", args=[proposal.pk]), {"kind": "accept"}).status_code == 403
    user.refresh_from_db()
    assert user.is_active  # still of the organisation: still reads


def test_daily_recheck_adds_a_new_team_member_and_signs_out_who_left(client, github, db):
    github.add_member(ORG, "octo-reader")
    sign_in(client, github, "octo-reader")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    github.add_member(ORG, "octo-reader", teams=["pt2-oncall"])
    assert membership.recheck_all() == (1, 0)
    assert may_decide(user, queue("pt2"))

    github.remove_member(ORG, "octo-reader")
    assert membership.recheck_all() == (1, 1)
    user.refresh_from_db()
    assert not user.is_active and not may_decide(user, queue("pt2"))
    assert client.get(reverse("home")).status_code == 302  # the session no longer holds


def test_recheck_keeps_what_was_stored_while_github_is_down(client, github, db):
    github.add_member(ORG, "octo-oncall", teams=["pt2-oncall"])
    sign_in(client, github, "octo-oncall")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    github.remove_from_team(ORG, "pt2-oncall", "octo-oncall")
    github.inject("GET", r"^/orgs/", status=503, times=100)
    with pytest.raises(membership.MembershipUnknown):
        membership.recheck_all()
    assert may_decide(user, queue("pt2"))


def test_recheck_with_a_token_that_cannot_see_the_members_changes_nothing(client, github, db):
    github.add_member(ORG, "octo-oncall", teams=["pt2-oncall"])
    sign_in(client, github, "octo-oncall")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    # GitHub's answer to a token whose account is not of the organisation: see the public list.
    github.inject("GET", rf"^/orgs/{ORG}/members/", status=302)
    with pytest.raises(membership.MembershipUnknown):
        membership.recheck_all()
    user.refresh_from_db()
    assert user.is_active and may_decide(user, queue("pt2"))


def test_recheck_without_a_token_asks_nothing_and_changes_nothing(client, github, db, settings):
    github.add_member(ORG, "octo-oncall", teams=["pt2-oncall"])
    sign_in(client, github, "octo-oncall")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    github.remove_member(ORG, "octo-oncall")
    settings.GITHUB_TOKEN = ""
    github.reset_log()
    assert membership.recheck_all() == (0, 0)
    assert github.requests == []
    user.refresh_from_db()
    assert user.is_active and may_decide(user, queue("pt2"))


def test_an_outsider_at_sign_in_is_one_whom_github_sends_to_the_public_list(client, github, db):
    github.inject("GET", rf"^/orgs/{ORG}/members/", status=302)
    refused = sign_in(client, github, "stranger")
    assert refused.status_code == 403


def test_an_inactive_user_back_in_the_organisation_signs_in_again(client, github, db):
    github.add_member(ORG, "octo-oncall")
    sign_in(client, github, "octo-oncall")
    user = get_user_model().objects.get(socialaccount__uid__isnull=False)
    user.is_active = False
    user.save()
    client.logout()
    assert sign_in(client, github, "octo-oncall").status_code == 302
    user.refresh_from_db()
    assert user.is_active


@pytest.mark.parametrize("team", ["pt2-oncall", "pytorch/", "pytorch/pt2 oncall", "a/b/c"])
def test_a_queue_names_its_team_as_organisation_slash_slug(db, team):
    pt2 = queue("pt2")
    pt2.github_team = team
    with pytest.raises(ValidationError, match="organisation/team-slug"):
        pt2.full_clean()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GITHUB_OAUTH_CLIENT_ID": "abc"}, "set together or not at all"),
        ({"GITHUB_OAUTH_CLIENT_SECRET": "abc"}, "set together or not at all"),
        ({"GITHUB_ORG": "py torch"}, "GITHUB_ORG must be"),
        ({"GITHUB_WEB_URL": "github.example.com"}, "GITHUB_WEB_URL must be an http(s) URL"),
        ({"GITHUB_API_URL": "https://api.github.com/?x=1"}, "GITHUB_API_URL must be"),
    ],
)
def test_sign_in_settings_are_parsed_strictly(env, message):
    result = subprocess.run(
        [sys.executable, "-c", "import console.settings"],
        cwd=Path(__file__).resolve().parent.parent,
        env={"PATH": os.environ.get("PATH", ""), "DEBUG": "1"} | env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr


def test_with_an_oauth_app_forms_may_lead_to_github_and_nowhere_else():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from console import settings; print(*settings.SECURE_CSP['form-action'])",
        ],
        cwd=Path(__file__).resolve().parent.parent,
        env={
            "PATH": os.environ.get("PATH", ""),
            "DEBUG": "1",
            "GITHUB_OAUTH_CLIENT_ID": "id",
            "GITHUB_OAUTH_CLIENT_SECRET": "secret",
            "GITHUB_WEB_URL": "https://github.example.com",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["'self'", "https://github.example.com"]
