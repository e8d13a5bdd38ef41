from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from tests.factories import make_proposal
from triage import backlog
from triage.models import Proposal, Queue

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def small_pages(settings):
    settings.TRIAGE_PAGE_SIZE = 3


def issues(count: int) -> list[Proposal]:
    """Pending pt2 proposals, the newest last; every second one shares its creation time with
    its neighbour, so the order needs its tie-breaker."""
    return [
        make_proposal(
            number=number,
            created=START + timedelta(hours=number // 2),
        )
        for number in range(1, count + 1)
    ]


def test_pages_follow_one_another_in_the_inbox_order_without_gaps_or_repeats(small_pages):
    made = issues(8)
    queue = Queue.objects.get(slug="pt2")
    for order in backlog.ORDERS:
        seen: list[int] = []
        after = None
        while True:
            page, last = backlog.page(queue, order, after)
            seen += [p.pk for p in page]
            if last is None:
                break
            after = last
        assert seen == list(backlog.pending(queue, order).values_list("pk", flat=True))
        assert sorted(seen) == sorted(p.pk for p in made)


def test_a_decision_taken_meanwhile_does_not_shift_the_next_page(small_pages):
    issues(7)
    queue = Queue.objects.get(slug="pt2")
    first, last = backlog.page(queue, "newest")
    expected_next = backlog.page(queue, "newest", last)[0]
    Proposal.objects.filter(pk=first[0].pk).update(status=Proposal.Status.DECIDED)
    assert backlog.page(queue, "newest", last)[0] == expected_next


def test_the_inbox_links_the_next_page_and_counts_every_pending_issue(client, oncall, small_pages):
    client.force_login(oncall)
    issues(5)
    response = client.get(reverse("inbox", args=["pt2"]))
    assert response.context["left"] == 5
    assert len(response.context["proposals"]) == 3
    cursor = response.context["next_cursor"]
    assert f"cursor={cursor}".encode() in response.content

    second = client.get(reverse("inbox", args=["pt2"]), {"cursor": cursor})
    assert second.status_code == 200
    assert len(second.context["proposals"]) == 2
    assert second.context["next_cursor"] is None
    assert b'id="first-page"' in second.content


@pytest.mark.parametrize("query", [{"cursor": "abc"}, {"cursor": "999999"}, {"order": "random"}])
def test_an_unknown_page_or_order_is_a_bad_request(client, oncall, query):
    client.force_login(oncall)
    issues(2)
    assert client.get(reverse("inbox", args=["pt2"]), query).status_code == 400


def test_next_and_previous_cross_page_boundaries(client, oncall, small_pages):
    client.force_login(oncall)
    issues(5)
    queue = Queue.objects.get(slug="pt2")
    page, last = backlog.page(queue, "newest")
    assert last is not None
    following_page = backlog.page(queue, "newest", last)[0]
    response = client.get(reverse("proposal", args=[last.pk]), {"order": "newest"})
    assert response.context["next_id"] == following_page[0].pk
    assert response.context["previous_id"] == page[-2].pk
    assert response.context["left"] == 5
    back = client.get(reverse("proposal", args=[following_page[0].pk]), {"order": "newest"})
    assert back.context["previous_id"] == last.pk


def test_a_decided_proposal_points_at_the_first_pending_one(small_pages):
    made = issues(3)
    decided = made[0]
    Proposal.objects.filter(pk=decided.pk).update(status=Proposal.Status.DECIDED)
    decided.refresh_from_db()
    newest_first = backlog.pending(decided.queue, "newest").first()
    assert newest_first is not None
    assert backlog.neighbours(decided, "newest") == (None, newest_first.pk, 2)


def test_a_long_backlog_is_counted_only_so_far():
    from triage.templatetags.triage_tags import pending_count

    issues(3)
    assert backlog.left(Queue.objects.get(slug="pt2")) == 3
    assert pending_count(3) == "3"
    assert pending_count(backlog.COUNT_UP_TO) == str(backlog.COUNT_UP_TO)
    assert pending_count(backlog.COUNT_UP_TO + 1) == f"{backlog.COUNT_UP_TO}+"


def filtered(client, **params):
    response = client.get(reverse("inbox", args=["pt2"]), params)
    assert response.status_code == 200
    return sorted(p.issue.number for p in response.context["proposals"])


@pytest.fixture
def mixed(db):
    """Four pt2 issues that differ in text, labels, author, age and what their proposal does."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    make_proposal(number=1, title="Dynamo graph break in a loop", created=now - timedelta(hours=2))
    make_proposal(
        number=2,
        title="Slow compile",
        body="It takes minutes. The FakeTensor cache misses every time.",
        labels=["oncall: pt2", "module: dynamo"],
        created=now - timedelta(days=3),
    )
    make_proposal(number=3, title="Question", body="How do I", created=now - timedelta(days=40))
    other = make_proposal(number=4, title="Segfault in inductor", created=now - timedelta(days=9))
    other.issue.author = "someone-else"
    other.issue.save()


def test_filters_narrow_the_inbox_and_combine(client, oncall, mixed):
    client.force_login(oncall)
    assert filtered(client) == [1, 2, 3, 4]
    assert filtered(client, q="graph break") == [1]
    assert filtered(client, q="faketensor") == [2]  # in the body, any case
    assert filtered(client, label="module: dynamo") == [2]
    assert filtered(client, author="@someone-else") == [4]
    assert filtered(client, age="7") == [1, 2]
    assert filtered(client, age="30") == [1, 2, 4]
    assert filtered(client, age="30", author="someone-else") == [4]
    quiet = sorted(p.issue.number for p in Proposal.objects.filter(queue__slug="pt2") if p.is_empty)
    assert filtered(client, changes="on") == sorted({1, 2, 3, 4} - set(quiet))
    tiers = {p.issue.number: p.tier for p in Proposal.objects.filter(queue__slug="pt2")}
    for tier in set(tiers.values()):
        assert filtered(client, tier=tier) == sorted(n for n, t in tiers.items() if t == tier)


def test_the_inbox_counts_what_matches_and_each_tier(client, oncall, mixed):
    client.force_login(oncall)
    response = client.get(reverse("inbox", args=["pt2"]), {"age": "7"})
    assert response.context["left"] == 2
    assert b'id="filtered-count"' in response.content
    tiers = [p.tier for p in Proposal.objects.filter(queue__slug="pt2", issue__number__in=[1, 2])]
    assert response.context["tier_counts"] == {tier: tiers.count(tier) for tier in set(tiers)}


def test_the_filters_stay_in_every_link_of_the_page(client, oncall, mixed, settings):
    settings.TRIAGE_PAGE_SIZE = 1
    client.force_login(oncall)
    response = client.get(reverse("inbox", args=["pt2"]), {"age": "30", "q": "i"})
    body = response.content.decode()
    assert 'value="i"' in body and '<option value="30" selected>' in body
    cursor = response.context["next_cursor"]
    assert f"q=i&amp;age=30&amp;cursor={cursor}" in body
    assert "order=confidence&amp;q=i&amp;age=30" in body
    second = client.get(reverse("inbox", args=["pt2"]), {"age": "30", "q": "i", "cursor": cursor})
    assert [p.issue.number for p in second.context["proposals"]] != [
        p.issue.number for p in response.context["proposals"]
    ]


def test_active_search_answers_with_the_list_alone(client, oncall, mixed):
    client.force_login(oncall)
    response = client.get(
        reverse("inbox", args=["pt2"]),
        {"q": "segfault"},
        headers={"HX-Request": "true", "HX-Target": "inbox-body"},
    )
    body = response.content.decode().strip()
    assert body.startswith('<div id="inbox-body"')
    assert "<form" not in body
    assert [p.issue.number for p in response.context["proposals"]] == [4]


def test_no_match_says_so(client, oncall, mixed):
    client.force_login(oncall)
    response = client.get(reverse("inbox", args=["pt2"]), {"q": "nothing like this"})
    assert b'id="no-match"' in response.content
    assert b'id="queue-done"' not in response.content


@pytest.mark.parametrize("query", [{"age": "2"}, {"tier": "certain"}, {"q": "x" * 201}])
def test_a_filter_outside_its_choices_is_a_bad_request(client, oncall, query):
    client.force_login(oncall)
    assert client.get(reverse("inbox", args=["pt2"]), query).status_code == 400


def decide_now(proposal, kind, user, add=()):
    from triage import outbox

    return outbox.decide(
        proposal,
        kind=kind,
        user=user,
        add_labels=list(add),
        remove_labels=[],
        comment_body="",
        close=False,
        note="not a compiler bug",
    )


def test_decided_issues_still_in_the_queue_stay_findable(client, oncall, settings):
    client.force_login(oncall)
    rejected = make_proposal(number=11)
    decide_now(rejected, "reject", oncall)
    triaged = make_proposal(number=12)
    decide_now(triaged, "accept", oncall, add=["triaged"])
    # Its write landed: the issue carries `triaged` now and left the queue.
    triaged.issue.labels = [*triaged.issue.labels, "triaged"]
    triaged.issue.save()
    make_proposal(number=13)  # still pending: in the inbox, not here

    response = client.get(reverse("decided", args=["pt2"]))
    assert [p.issue.number for p in response.context["rows"]] == [11]
    assert "not a compiler bug" in response.content.decode()
    assert b'id="decided-link"' in client.get(reverse("inbox", args=["pt2"])).content


def test_the_decided_list_pages(client, oncall, settings):
    settings.TRIAGE_PAGE_SIZE = 2
    client.force_login(oncall)
    for number in (21, 22, 23):
        decide_now(make_proposal(number=number), "reject", oncall)
    url = reverse("decided", args=["pt2"])
    first = client.get(url)
    assert [p.issue.number for p in first.context["rows"]] == [23, 22]
    second = client.get(url, {"after": first.context["next_after"]})
    assert [p.issue.number for p in second.context["rows"]] == [21]
    assert second.context["next_after"] is None
    assert client.get(url, {"after": "x"}).status_code == 400


def test_an_issue_pending_in_another_queue_is_still_listed_as_decided_here(client, oncall):
    from tests.factories import queue
    from triage.proposing import propose

    client.force_login(oncall)
    both = make_proposal(number=31, labels=["oncall: pt2", "oncall: distributed"])
    assert propose(both.issue, queue("distributed")) is not None
    decide_now(both, "reject", oncall)
    response = client.get(reverse("decided", args=["pt2"]))
    assert [p.issue.number for p in response.context["rows"]] == [31]


def test_a_page_reads_only_what_its_rows_show(client, oncall):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_proposal(number=1, body="x" * 10_000)
    client.force_login(oncall)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("inbox", args=["pt2"]))
    assert response.status_code == 200
    page = next(q["sql"] for q in queries if '"triage_issue"."title"' in q["sql"])
    # A proposal's citations and rationale and the issue's text are for the issue page.
    for heavy in ('"citations"', '"rationale"', '"triage_issue"."body"', '"comments"'):
        assert heavy not in page
