"""Who may decide in which queue; anyone else who can sign in may only read.

A user decides in a queue when they are a superuser, in the `oncall` group (the demo's
password users, who decide everywhere), in the group the queue names in the admin, or a member
of the queue's GitHub team as last checked (see triage.signin.membership): never by asking
GitHub inside a request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.auth.models import Group, Permission, PermissionsMixin
from django.db.models import Q

from triage.models import Queue, TeamMembership

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
    from django.db.models import QuerySet

    User = AbstractBaseUser | AnonymousUser

ONCALL_GROUP = "oncall"


def oncall_group() -> Group:
    """The group that decides in every queue (the global `triage.decide` permission)."""
    group, _ = Group.objects.get_or_create(name=ONCALL_GROUP)
    group.permissions.add(
        Permission.objects.get(content_type__app_label="triage", codename="decide")
    )
    return group


def team_key(team: str) -> str:
    # GitHub matches organisation and team names whatever their case.
    return team.strip().lower()


def decides_everywhere(user: User) -> bool:
    # Superusers have every permission; the oncall group has this one.
    return isinstance(user, PermissionsMixin) and user.has_perm("triage.decide")


def queues_decided_by(user: User) -> QuerySet[Queue]:
    """The queues this user may decide in."""
    if not user.is_authenticated:
        return Queue.objects.none()
    if decides_everywhere(user):
        return Queue.objects.all()
    teams = TeamMembership.objects.filter(user_id=user.pk).values_list("team", flat=True)
    return Queue.objects.filter(
        Q(deciders__user=user) | Q(github_team__in=[team_key(team) for team in teams])
    ).distinct()


def may_decide(user: User, queue: Queue) -> bool:
    if not user.is_authenticated:
        return False
    if decides_everywhere(user):
        return True
    if (
        queue.deciders_id is not None
        and Group.objects.filter(pk=queue.deciders_id, user__pk=user.pk).exists()
    ):
        return True
    return bool(queue.github_team) and (
        TeamMembership.objects.filter(user_id=user.pk, team=team_key(queue.github_team)).exists()
    )


def decides_somewhere(user: User) -> bool:
    """Decides in at least one queue: may run the triage-review meeting."""
    return queues_decided_by(user).exists()
