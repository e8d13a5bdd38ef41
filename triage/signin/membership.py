"""Organisation and team membership, asked of GitHub at sign-in and by beat, and stored.

At sign-in the user's own token asks (with the read:org scope it sees their private
memberships); the daily re-check asks with the console's GITHUB_TOKEN, whose account must be a
member of the organisation to see private members. Each answer replaces what was stored for
the teams it asked about: someone removed from a team on GitHub stops deciding there.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

import requests
from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from github import Auth, Github

from triage.models import Queue, TeamMembership
from triage.roles import team_key

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.models import AbstractBaseUser

log = logging.getLogger(__name__)


class MembershipUnknown(Exception):
    """GitHub gave no usable answer (down, rate-limited, token refused): nothing is changed."""


@dataclass
class Membership:
    login: str
    in_org: bool
    teams: set[str] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)


def configured_teams() -> set[str]:
    """Every team some queue names: the only teams worth asking about."""
    return {
        team_key(team)
        for team in Queue.objects.exclude(github_team="").values_list("github_team", flat=True)
    }


def _client(token: str) -> Github:
    return Github(
        base_url=settings.GITHUB_API_URL,
        auth=Auth.Token(token) if token else None,
        timeout=int(settings.GITHUB_TIMEOUT_SECONDS),
        retry=None,
    )


def _status(client: Github, path: str) -> int:
    try:
        status, _, _ = client.requester.requestJson("GET", path)
    except requests.RequestException as exc:
        raise MembershipUnknown(f"GitHub did not answer: {exc}") from exc
    return status


def _state(body: str) -> str:
    try:
        parsed = json.loads(body)
    except ValueError:
        raise MembershipUnknown("GitHub answered a team membership with no JSON") from None
    return str(parsed.get("state", "")) if isinstance(parsed, dict) else ""


def check(login: str, teams: Iterable[str], token: str, *, own_token: bool) -> Membership:
    """Is `login` a member of GITHUB_ORG, and of which of `teams` (org/team-slug)?

    `own_token`: the token is the user's own (at sign-in), not the console's."""
    client = _client(token)
    org = settings.GITHUB_ORG
    # 204: a member; 404: not. 302 sends a requester who is not a member to the public list: at
    # sign-in that is the user, who is then no member; for the console's token it means the
    # token cannot see the members, which says nothing about the user.
    status = _status(client, f"/orgs/{quote(org)}/members/{quote(login)}")
    if status == 302 and own_token:
        status = 404
    if status not in (204, 404):
        raise MembershipUnknown(f"GitHub answered {status} about the {org} organisation")
    found = Membership(login=login, in_org=status == 204)
    if not found.in_org:
        return found
    for team in sorted({team_key(team) for team in teams}):
        team_org, _, slug = team.partition("/")
        try:
            status, _, body = client.requester.requestJson(
                "GET", f"/orgs/{quote(team_org)}/teams/{quote(slug)}/memberships/{quote(login)}"
            )
        except requests.RequestException as exc:
            raise MembershipUnknown(f"GitHub did not answer: {exc}") from exc
        if status == 200:
            # A pending invitation is no membership yet.
            if _state(body) == "active":
                found.teams.add(team)
        elif status != 404:
            raise MembershipUnknown(f"GitHub answered {status} about the team {team}")
        found.asked.add(team)
    return found


def record(user: AbstractBaseUser, found: Membership) -> None:
    """Store the teams `user` is in, and drop those of the asked teams they are no longer in."""
    now = timezone.now()
    with transaction.atomic():
        TeamMembership.objects.filter(user_id=user.pk).exclude(team__in=found.teams).filter(
            team__in=found.asked
        ).delete()
        if not found.in_org:
            # Out of the organisation: out of every team, whether or not it was asked about.
            TeamMembership.objects.filter(user_id=user.pk).delete()
        for team in found.teams:
            TeamMembership.objects.update_or_create(
                user_id=user.pk, team=team, defaults={"checked_at": now}
            )


def recheck_all() -> tuple[int, int]:
    """Ask GitHub again about everyone who signed in with it; returns (checked, left the org).

    Someone no longer in the organisation is made inactive: their sessions end and they cannot
    sign in until they are a member again. On an unusable answer the run stops and what was
    stored stays: an outage of GitHub must not take everyone's rights away.
    """
    if not settings.GITHUB_TOKEN:
        # Anonymous requests see public members only: everyone else would look gone.
        log.warning("membership not re-checked: GITHUB_TOKEN is not set")
        return 0, 0
    teams = configured_teams()
    checked = gone = 0
    accounts = SocialAccount.objects.filter(provider="github").select_related("user")
    for account in accounts.order_by("pk"):
        login = account.extra_data.get("login") if isinstance(account.extra_data, dict) else None
        if not isinstance(login, str) or not login:
            continue
        found = check(login, teams, settings.GITHUB_TOKEN, own_token=False)
        record(account.user, found)
        checked += 1
        if not found.in_org and account.user.is_active:
            account.user.is_active = False
            account.user.save(update_fields=["is_active"])
            gone += 1
            log.info("@%s left the %s organisation: made inactive", login, settings.GITHUB_ORG)
    return checked, gone
