"""allauth's adapters: who may get in through GitHub, and no local sign-up at all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.shortcuts import render

from triage.forms import ThrottledAuthenticationForm
from triage.signin import membership

if TYPE_CHECKING:
    from allauth.socialaccount.models import SocialLogin
    from django.contrib.auth.models import AbstractBaseUser
    from django.http import HttpRequest, HttpResponse

# The membership found during this sign-in, until the new user is saved.
FOUND = "_triage_membership"


def refused(request: HttpRequest, reason: str, status: int) -> HttpResponse:
    """The login page again, saying why GitHub's sign-in was not let in."""
    context = {"form": ThrottledAuthenticationForm(request), "signin_error": reason}
    return render(request, "registration/login.html", context, status=status)


class NoLocalSignupAdapter(DefaultAccountAdapter):
    """Accounts come from GitHub (or from an admin): nobody signs up with a password."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return False


class SignInAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        # Only members of the organisation get this far (pre_social_login).
        return True

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        login = str(sociallogin.account.extra_data.get("login") or "")
        org = settings.GITHUB_ORG
        token = sociallogin.token.token if sociallogin.token else ""
        try:
            found = membership.check(login, membership.configured_teams(), token, own_token=True)
        except membership.MembershipUnknown:
            raise ImmediateHttpResponse(
                refused(
                    request,
                    "GitHub did not say whether you are a member of the "
                    f"{org} organisation. Try again in a minute.",
                    503,
                )
            ) from None
        if not found.in_org:
            raise ImmediateHttpResponse(
                refused(
                    request,
                    f"@{login} is not a member of the {org} organisation on GitHub: only its "
                    "members may sign in. If you joined it recently, check that you accepted "
                    "the invitation and that the console may see your membership.",
                    403,
                )
            )
        setattr(sociallogin, FOUND, found)
        if sociallogin.is_existing:
            user = sociallogin.user
            if not user.is_active:
                # Made inactive by a re-check while out of the organisation; back in it now.
                user.is_active = True
                user.save(update_fields=["is_active"])
            membership.record(user, found)

    def save_user(
        self, request: HttpRequest, sociallogin: SocialLogin, form: Any = None
    ) -> AbstractBaseUser:
        user = super().save_user(request, sociallogin, form)
        membership.record(user, getattr(sociallogin, FOUND))
        return user
