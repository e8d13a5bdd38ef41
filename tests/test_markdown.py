from __future__ import annotations

from html.parser import HTMLParser

import pytest

from triage.markdown import ALLOWED_TAGS, render


class ElementCollector(HTMLParser):
    """Every element and attribute a browser would build from the HTML."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))


def elements(html: str):
    collector = ElementCollector()
    collector.feed(html)
    return collector.elements


HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<style>body{display:none}</style>",
    '<a href="javascript:alert(1)">click</a>',
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "![x](javascript:alert(1))",
    '<svg onload="alert(1)"><circle/></svg>',
    '<iframe src="https://evil.example"></iframe>',
    '<div style="position:fixed;top:0">overlay</div>',
    '<details open ontoggle="alert(1)"><summary>x</summary></details>',
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    '<form action="https://evil.example"><input name="q"></form>',
    '<meta http-equiv="refresh" content="0;url=https://evil.example">',
]


@pytest.mark.parametrize("source", HOSTILE)
def test_no_script_style_or_handler_survives(source):
    # Also with the source as raw HTML that the Markdown parser passed through untouched.
    for html in (render(source), render(f"<div>\n{source}\n</div>"), render(f"* {source}")):
        for tag, attrs in elements(html):
            assert tag in ALLOWED_TAGS, (source, html)
            for name, value in attrs.items():
                assert not name.startswith("on"), (source, html)
                assert name != "style", (source, html)
                if name in ("href", "src"):
                    assert (value or "").split(":")[0].lower() in ("http", "https", "mailto")


def test_markdown_is_rendered():
    html = render(
        "### Title\n\n```python\nimport torch\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n[docs](https://pytorch.org)"
    )
    assert "<h3>Title</h3>" in html
    assert '<code class="language-python">import torch' in html
    assert "<table>" in html
    assert 'href="https://pytorch.org"' in html
    assert 'rel="nofollow noopener noreferrer ugc"' in html


def test_raw_html_in_the_source_is_shown_as_text():
    assert "&lt;b&gt;bold&lt;/b&gt;" in render("<b>bold</b>")


def test_a_megabyte_body_is_cut_to_what_is_rendered():
    html = render("word " * 250_000)
    assert len(html) < 250_000


def links(html: str) -> list[tuple[str | None, str | None]]:
    return [(attrs.get("href"), attrs.get("target")) for tag, attrs in elements(html) if tag == "a"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Fixed by #123.", "https://github.com/pytorch/pytorch/issues/123"),
        ("cc @ezyang, thanks", "https://github.com/ezyang"),
        ("Bisected to 9f2a1c3e4b", "https://github.com/pytorch/pytorch/commit/9f2a1c3e4b"),
        (
            "See https://github.com/pytorch/pytorch/pull/5 now.",
            "https://github.com/pytorch/pytorch/pull/5",
        ),
        ("(logs: https://example.com/a_b?x=1)", "https://example.com/a_b?x=1"),
    ],
)
def test_references_become_links_that_open_in_a_new_tab(text, expected):
    assert links(render(text, "pytorch/pytorch")) == [(expected, "_blank")]


@pytest.mark.parametrize(
    "text",
    [
        "`#123` and `@user` and `9f2a1c3e4b` in code",
        "```\n#123 @user 9f2a1c3e4b https://example.com\n```",
        "mail me at someone@example.com",
        "color #fff, issue#12, version 1234567, word deadbeef, path a/9f2a1c3e4b",
        "javascript:alert(1) and ftp://example.com/x",
    ],
)
def test_what_is_not_a_reference_stays_text(text):
    assert links(render(text, "pytorch/pytorch")) == []


def test_a_link_already_written_is_not_linked_twice():
    html = render("[see #12](https://github.com/pytorch/pytorch/issues/12)", "pytorch/pytorch")
    assert links(html) == [("https://github.com/pytorch/pytorch/issues/12", "_blank")]


def test_without_a_repository_only_urls_and_users_link():
    assert [href for href, _ in links(render("#5 @bob 9f2a1c3e4b https://x.org/a"))] == [
        "https://github.com/bob",
        "https://x.org/a",
    ]


def test_a_reference_at_the_end_of_a_sentence_is_linked():
    html = render("Thanks @bob. Bisected to 9f2a1c3e4b. See a1b2c3d.py too.", "pytorch/pytorch")
    assert [href for href, _ in links(html)] == [
        "https://github.com/bob",
        "https://github.com/pytorch/pytorch/commit/9f2a1c3e4b",
    ]
