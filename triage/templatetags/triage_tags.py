from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from triage import markdown
from triage.backlog import COUNT_UP_TO

register = template.Library()


@register.filter
def render_markdown(text: str) -> SafeString:
    return mark_safe(markdown.render(text))


@register.filter
def truncated(text: str) -> bool:
    return len(text) > markdown.MAX_RENDERED_CHARS


@register.filter
def pending_count(left: int) -> str:
    """A backlog is counted only so far (triage.backlog.left): past that, "1000+"."""
    return f"{COUNT_UP_TO}+" if left > COUNT_UP_TO else str(left)
