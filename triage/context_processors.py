from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings

from triage.models import Queue

if TYPE_CHECKING:
    from django.http import HttpRequest


def console(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        # The login page offers the demo's users in the demo.
        return {"demo": settings.TRIAGE_DEMO}
    return {
        "nav_queues": Queue.objects.only("slug", "name"),
        "can_decide": request.user.has_perm("triage.decide"),
    }
