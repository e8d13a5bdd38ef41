"""GitHub's webhook deliveries: checked before anything is believed, then turned into work.

A delivery is hostile until its signature (HMAC-SHA256 of the body with the shared secret,
compared in constant time) says it comes from GitHub; a delivery id is taken once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from django.db import IntegrityError, transaction

from triage.models import Queue, WebhookDelivery

log = logging.getLogger(__name__)

# Events that say an issue changed: the console re-reads it.
ISSUE_EVENTS = frozenset({"issues", "issue_comment"})
# Taken and answered, nothing to do: GitHub's ping, and label renames across the repository.
QUIET_EVENTS = frozenset({"ping", "label"})


class DeliveryRefused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def verify(secret: str, body: bytes, signature_header: str) -> None:
    if not secret:
        raise DeliveryRefused(403, "no webhook secret is configured")
    if not signature_header.startswith("sha256="):
        raise DeliveryRefused(403, "the delivery is not signed")
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature_header.removeprefix("sha256=")):
        raise DeliveryRefused(403, "the signature does not match")


def take(delivery_id: str, event: str) -> None:
    """Record a delivery id once; a second delivery with it is a replay."""
    if not delivery_id or len(delivery_id) > 100:
        raise DeliveryRefused(400, "no usable X-GitHub-Delivery id")
    try:
        with transaction.atomic():
            WebhookDelivery.objects.create(delivery_id=delivery_id, event=event[:50])
    except IntegrityError:
        raise DeliveryRefused(400, f"delivery {delivery_id} was already taken") from None


def issue_to_refresh(event: str, body: bytes) -> tuple[str, int] | None:
    """The (repository, number) a delivery asks the console to re-read, if any of its queues
    watches that repository."""
    if event in QUIET_EVENTS:
        return None
    if event not in ISSUE_EVENTS:
        raise DeliveryRefused(400, f"event {event!r} is not taken")
    try:
        payload: Any = json.loads(body)
    except (ValueError, RecursionError):
        raise DeliveryRefused(400, "the body is not JSON") from None
    issue = payload.get("issue") if isinstance(payload, dict) else None
    repository = payload.get("repository") if isinstance(payload, dict) else None
    number = issue.get("number") if isinstance(issue, dict) else None
    name = repository.get("full_name") if isinstance(repository, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or not isinstance(name, str):
        raise DeliveryRefused(400, "no issue number and repository in the delivery")
    # The payload's content is not used: the console reads the issue from GitHub itself.
    watched = (
        Queue.objects.filter(repository__iexact=name).values_list("repository", flat=True).first()
    )
    return (watched, number) if watched is not None else None
