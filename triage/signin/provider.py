"""allauth's GitHub provider, reading GitHub's addresses from settings when it runs.

allauth's own adapter fixes its URLs when it is imported, from SOCIALACCOUNT_PROVIDERS; ours
reads GITHUB_WEB_URL and GITHUB_API_URL each time, the same settings the rest of the console
uses to reach GitHub, GitHub Enterprise or the local stand-in.
"""

from __future__ import annotations

from allauth.socialaccount.providers.github.provider import GitHubProvider

from triage.signin.views import ConsoleGitHubAdapter


class ConsoleGitHubProvider(GitHubProvider):
    # allauth finds the provider's urls and views in this package.
    package = "triage.signin"
    oauth2_adapter_class = ConsoleGitHubAdapter


provider_classes = [ConsoleGitHubProvider]
