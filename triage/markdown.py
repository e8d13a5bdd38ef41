"""Rendering issue text, written by strangers, as safe HTML."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import nh3
from django.conf import settings
from markdown_it import MarkdownIt
from markdown_it.token import Token

if TYPE_CHECKING:
    from markdown_it.rules_core import StateCore

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

# What GitHub links in an issue's text: bare URLs (http and https only), #123, @user, and commit
# hashes (7 to 40 hex digits with a letter and a digit, so neither a number nor a word).
REFERENCE = re.compile(
    r"(?P<url>https?://[^\s<>\"'`]*[^\s<>\"'`.,;:!?)\]])"
    r"|(?<![\w/#&])#(?P<issue>[1-9][0-9]{0,8})\b"
    r"|(?<![\w/@.+-])@(?P<user>[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38})\b(?![@\w-]|\.\w)"
    r"|(?<![\w/.#-])(?P<sha>(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40})\b(?![\w-]|\.\w)"
)


def _reference_links(state: StateCore) -> None:
    """Turn references in plain text (not in code, not inside a link) into links."""
    repository: str = state.env.get("repository", "")
    host = f"https://{settings.GITHUB_WEB_HOST}"
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        children: list[Token] = []
        in_link = 0
        for token in block.children:
            in_link += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type != "text" or in_link:
                children.append(token)
                continue
            children += _linked(token.content, host, repository)
        block.children = children


def _linked(text: str, host: str, repository: str) -> list[Token]:
    tokens: list[Token] = []
    done = 0
    for match in REFERENCE.finditer(text):
        if match["url"]:
            href = match["url"]
        elif match["user"]:
            href = f"{host}/{match['user']}"
        elif not repository:
            continue
        elif match["issue"]:
            href = f"{host}/{repository}/issues/{match['issue']}"
        else:
            href = f"{host}/{repository}/commit/{match['sha']}"
        if match.start() > done:
            tokens.append(_text(text[done : match.start()]))
        opening = Token("link_open", "a", 1)
        opening.attrs = {"href": href}
        tokens += [opening, _text(match.group(0)), Token("link_close", "a", -1)]
        done = match.end()
    if done < len(text):
        tokens.append(_text(text[done:]))
    return tokens


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


_parser = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)
_parser.core.ruler.push("github_references", _reference_links)


def render(text: str, repository: str = "") -> str:
    """Safe HTML of a stranger's Markdown; with the issue's repository, #123 and commit hashes
    link to it. Every link opens in a new tab: the oncall's place in the console stays."""
    html = _parser.render(text[:MAX_RENDERED_CHARS], {"repository": repository})
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="nofollow noopener noreferrer ugc",
        set_tag_attribute_values={"a": {"target": "_blank"}},
    )
