from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from django.conf import settings

from triage.models import Queue
from triage.roles import decides_somewhere

if TYPE_CHECKING:
    from django.http import HttpRequest


def console(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        # The login page offers the demo's users in the demo, and GitHub once it is configured.
        github = settings.SOCIALACCOUNT_PROVIDERS.get("github", {})
        return {"demo": settings.TRIAGE_DEMO, "github_signin": bool(github.get("APPS"))}
    return {
        "nav_queues": Queue.objects.only("slug", "name"),
        # A queue's pages say whether this user decides there; elsewhere, whether anywhere
        # (asked only by a page that shows it: a template calls a callable).
        "can_decide": functools.partial(decides_somewhere, request.user),
    }
