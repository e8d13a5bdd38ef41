from __future__ import annotations

from allauth.socialaccount.providers.oauth2.urls import default_urlpatterns

from triage.signin.provider import ConsoleGitHubProvider

urlpatterns = default_urlpatterns(ConsoleGitHubProvider)
