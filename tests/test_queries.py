from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.factories import make_proposal

pytestmark = pytest.mark.django_db


def count_queries(client, url):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


def test_inbox_runs_a_constant_number_of_queries(client, oncall):
    client.force_login(oncall)
    make_proposal(number=1)
    small = count_queries(client, reverse("inbox", args=["pt2"]))
    for number in range(2, 40):
        make_proposal(number=number)
    large = count_queries(client, reverse("inbox", args=["pt2"]))
    # The page, the pending count, the queue, the session and user, the rotation's markers (the
    # count per tier only once a filter narrows the list).
    assert small == large == 9


def test_issue_page_runs_a_constant_number_of_queries(client, oncall):
    client.force_login(oncall)
    first = make_proposal(number=1, comments=["one", "two"])
    small = count_queries(client, reverse("proposal", args=[first.pk]))
    for number in range(2, 40):
        make_proposal(number=number, comments=["a comment"] * 5)
    large = count_queries(client, reverse("proposal", args=[first.pk]))
    # Three of them find the neighbours by key and count what is left; one finds the issue's
    # proposals in other queues; one reads its stored similar issues (none here: see
    # tests/test_similar.py for the page with them).
    assert small == large == 12


def test_a_one_megabyte_body_stays_usable(client, oncall):
    client.force_login(oncall)
    trace = '  File "/opt/torch/_inductor/graph.py", line 1, in run\n' * 20_000
    body = "### 🐛 Describe the bug\n\n```\n" + trace[:1_000_000] + "\n```\n"
    assert len(body) > 1_000_000
    proposal = make_proposal(number=77, body=body)

    started = time.perf_counter()
    issue_page = client.get(reverse("proposal", args=[proposal.pk]))
    inbox = client.get(reverse("inbox", args=["pt2"]))
    elapsed = time.perf_counter() - started

    assert issue_page.status_code == inbox.status_code == 200
    assert len(issue_page.content) < 400_000
    assert b"longer than the console renders" in issue_page.content
    assert len(inbox.content) < 50_000
    assert elapsed < 2.0


def reproposed(times: int):
    """One issue proposed afresh `times` times (its body edited in between)."""
    from tests.factories import make_issue, queue
    from triage.proposing import propose

    issue = make_issue(number=900)
    for edit in range(times):
        issue.body = f"torch.compile fails, edit {edit}"
        issue.save()
        propose(issue, queue("pt2"))
    return issue


def test_an_issue_history_pages_through_its_proposals(client, oncall, settings):
    settings.TRIAGE_PAGE_SIZE = 2
    client.force_login(oncall)
    issue = reproposed(5)
    url = reverse("history", args=[issue.pk])
    seen = []
    response = client.get(url)
    while True:
        seen += [p.pk for p in response.context["proposals"]]
        after = response.context["next_after"]
        if after is None:
            break
        response = client.get(url, {"after": after})
    assert seen == sorted(issue.proposals.values_list("pk", flat=True))
    assert len(seen) == 5
    assert client.get(url, {"after": "x"}).status_code == 400


def test_the_history_runs_a_constant_number_of_queries(client, oncall, settings):
    settings.TRIAGE_PAGE_SIZE = 3
    client.force_login(oncall)
    issue = reproposed(1)
    small = count_queries(client, reverse("history", args=[issue.pk]))
    more = reproposed(8)
    assert more.pk == issue.pk
    assert count_queries(client, reverse("history", args=[issue.pk])) == small
