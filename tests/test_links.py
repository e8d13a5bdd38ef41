"""An issue's URL comes from outside: only https:// on GitHub's host becomes a link."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_issue, make_proposal
from triage.models import safe_github_url

HOSTILE = [
    "javascript:alert(document.cookie)",
    "JAVASCRIPT:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "http://github.com/pytorch/pytorch/issues/1",
    "https://github.com.evil.example/pytorch/pytorch/issues/1",
    "https://evil.example/github.com/issues/1",
    "https://github.com:8443/pytorch/pytorch/issues/1",
    "//github.com/pytorch/pytorch/issues/1",
    "https://[::1/",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_anything_but_https_on_the_github_host_is_no_link(url):
    assert safe_github_url(url) == ""


def test_an_https_url_on_the_github_host_is_a_link():
    url = "https://github.com/pytorch/pytorch/issues/1"
    assert safe_github_url(url) == url


def test_the_host_is_configurable_for_github_enterprise(settings):
    settings.GITHUB_WEB_HOST = "github.example.com"
    assert safe_github_url("https://github.example.com/a/b/issues/1")
    assert not safe_github_url("https://github.com/a/b/issues/1")


@pytest.mark.django_db
def test_no_page_links_a_hostile_url(client, oncall):
    proposal = make_proposal(number=7001)
    issue = proposal.issue
    issue.html_url = "javascript:alert(1)"
    issue.save(update_fields=["html_url"])
    client.force_login(oncall)
    for url in (
        reverse("proposal", args=[proposal.pk]),
        reverse("history", args=[issue.pk]),
    ):
        body = client.get(url).content.decode()
        assert "javascript:" not in body, url
        assert f"#{issue.number}" in body


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "present", "absent"),
    [
        # A ")" would end the Markdown link early and start one of the URL's own making.
        (
            "https://github.com/x/y/issues/1)[click](javascript:alert(1)",
            "[#7002](https://github.com/x/y/issues/1%29[click]%28javascript:alert%281%29)",
            "](javascript:",
        ),
        # Not a GitHub link at all: the number without a link.
        ("javascript:alert(1)", "- #7002 ", "javascript"),
    ],
)
def test_the_markdown_export_cannot_be_broken_out_of(url, present, absent):
    from django.utils import timezone

    from triage import agenda

    issue = make_issue(number=7002, labels=["oncall: pt2", "triage review"])
    issue.html_url = url
    issue.save(update_fields=["html_url"])
    meeting = agenda.open_meeting(timezone.localdate())
    agenda.build(meeting)

    text = agenda.as_markdown(meeting)
    assert present in text
    assert absent not in text
