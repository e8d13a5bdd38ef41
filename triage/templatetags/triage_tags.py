from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.safestring import SafeString, mark_safe

from triage import markdown
from triage.backlog import COUNT_UP_TO

register = template.Library()


@register.filter
def render_markdown(text: str, repository: str = "") -> SafeString:
    return mark_safe(markdown.render(text, repository))


@register.filter
def as_datetime(value: str) -> datetime | None:
    """A timestamp stored as ISO text (a comment's), for the `date` filter; None if it is not."""
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None


@register.filter
def truncated(text: str) -> bool:
    return len(text) > markdown.MAX_RENDERED_CHARS


@register.filter
def pending_count(left: int) -> str:
    """A backlog is counted only so far (triage.backlog.left): past that, "1000+"."""
    return f"{COUNT_UP_TO}+" if left > COUNT_UP_TO else str(left)


@register.filter
def get_item(mapping: dict[str, object], key: str) -> object:
    return mapping.get(key)
