"""People are named by their GitHub handle: the login of their GitHub account (allauth's
social account, kept current at each sign-in), or the username of a password-only account
(the demo's users, accounts an admin made)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.models import AbstractBaseUser


def handles(user_ids: Iterable[int]) -> dict[int, str]:
    """Each user's handle, in two queries whatever the number of users."""
    wanted = set(user_ids)
    names: dict[int, str] = dict(
        get_user_model().objects.filter(pk__in=wanted).values_list("pk", "username")
    )
    accounts = SocialAccount.objects.filter(provider="github", user_id__in=wanted)
    for user_id, extra in accounts.values_list("user_id", "extra_data"):
        login = extra.get("login") if isinstance(extra, dict) else None
        if isinstance(login, str) and login:
            names[user_id] = login
    return names


def handle(user: AbstractBaseUser) -> str:
    return handles([user.pk]).get(user.pk, user.get_username())


def user_for_handle(name: str) -> AbstractBaseUser | None:
    """The active user a handle (with or without its @) names, GitHub's login first."""
    name = name.strip().removeprefix("@")
    if not name:
        return None
    account = (
        SocialAccount.objects.filter(
            provider="github", extra_data__login__iexact=name, user__is_active=True
        )
        .select_related("user")
        .first()
    )
    if account is not None:
        user: AbstractBaseUser = account.user
        return user
    return get_user_model().objects.filter(username=name, is_active=True).first()
