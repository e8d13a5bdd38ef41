"""The OAuth views allauth routes to for the GitHub provider (see provider.py)."""

from __future__ import annotations

from allauth.socialaccount.providers.github.views import GitHubOAuth2Adapter
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from django.conf import settings


class ConsoleGitHubAdapter(GitHubOAuth2Adapter):
    @property
    def access_token_url(self) -> str:
        return f"{settings.GITHUB_WEB_URL}/login/oauth/access_token"

    @property
    def authorize_url(self) -> str:
        return f"{settings.GITHUB_WEB_URL}/login/oauth/authorize"

    @property
    def profile_url(self) -> str:
        return f"{settings.GITHUB_API_URL}/user"

    @property
    def emails_url(self) -> str:
        return f"{settings.GITHUB_API_URL}/user/emails"


oauth2_login = OAuth2LoginView.adapter_view(ConsoleGitHubAdapter)
oauth2_callback = OAuth2CallbackView.adapter_view(ConsoleGitHubAdapter)
