"""Rendering issue text, written by strangers, as safe HTML."""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

# Raw HTML in the source is escaped by the parser (html=False); nh3 then keeps only these tags
# and attributes, so no script, style, event handler or javascript: URL survives either path.
ALLOWED_TAGS = {
    "a",
    "p",
    "br",
    "hr",
    "pre",
    "code",
    "blockquote",
    "em",
    "strong",
    "del",
    "s",
    "ul",
    "ol",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "details",
    "summary",
    "img",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "code": {"class"},
    "th": {"align"},
    "td": {"align"},
    "ol": {"start"},
}
# A pathological body is shown as source past this size: rendering megabytes of Markdown would
# hold the request for seconds and the oncall does not read that far anyway.
MAX_RENDERED_CHARS = 200_000

_parser = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)


def render(text: str) -> str:
    html = _parser.render(text[:MAX_RENDERED_CHARS])
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="nofollow noopener noreferrer ugc",
    )
