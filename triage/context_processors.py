from __future__ import annotations

from typing import TYPE_CHECKING, Any

from triage.models import Queue

if TYPE_CHECKING:
    from django.http import HttpRequest


def console(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        return {}
    return {
        "nav_queues": Queue.objects.only("slug", "name"),
        "can_decide": request.user.has_perm("triage.decide"),
    }
