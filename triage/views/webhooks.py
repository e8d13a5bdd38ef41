from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from triage import webhooks
from triage.tasks import refresh_issue

log = logging.getLogger(__name__)


@csrf_exempt
@login_not_required
@require_POST
def github_webhook(request: HttpRequest) -> HttpResponse:
    """A delivery from GitHub: signature first, then the delivery id, then the event."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not length.isdigit() or int(length) > settings.GITHUB_WEBHOOK_MAX_BYTES:
        log.warning("webhook refused: body of %s bytes", length)
        return HttpResponse("Too large.", status=400, content_type="text/plain")
    body = request.body
    event = request.headers.get("X-GitHub-Event", "")
    try:
        webhooks.verify(
            settings.GITHUB_WEBHOOK_SECRET, body, request.headers.get("X-Hub-Signature-256", "")
        )
        webhooks.take(request.headers.get("X-GitHub-Delivery", ""), event)
        target = webhooks.issue_to_refresh(event, body)
    except webhooks.DeliveryRefused as refused:
        log.warning("webhook refused (%s): %s", refused.status, refused)
        return HttpResponse(str(refused), status=refused.status, content_type="text/plain")
    if target is not None:
        refresh_issue.delay_on_commit(*target)
    return HttpResponse(status=204)
