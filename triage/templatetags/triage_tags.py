from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from triage import markdown

register = template.Library()


@register.filter
def render_markdown(text: str) -> SafeString:
    return mark_safe(markdown.render(text))


@register.filter
def truncated(text: str) -> bool:
    return len(text) > markdown.MAX_RENDERED_CHARS
