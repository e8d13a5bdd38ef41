from __future__ import annotations

import pytest

from tests.factories import make_issue, make_user, queue
from triage import outbox, proposing
from triage.models import Proposal

pytestmark = pytest.mark.django_db

GRAPH_BREAK = "torch._dynamo.exc.Unsupported: call_function\n```python\nimport torch\n```"


def fields(proposal: Proposal) -> tuple[object, ...]:
    return (
        proposal.issue_id,
        proposal.add_labels,
        proposal.remove_labels,
        proposal.score,
        proposal.tier,
        proposal.citations,
        proposal.input_hash,
        proposal.issue_created_at,
    )


def test_many_at_once_propose_what_one_by_one_would():
    pt2 = queue("pt2")
    issues = [make_issue(number=n, body=GRAPH_BREAK if n % 2 else "") for n in range(1, 7)]
    one_by_one = {}
    for issue in issues:
        proposal = proposing.propose(issue, pt2)
        assert proposal is not None
        one_by_one[issue.pk] = fields(proposal)
    Proposal.objects.all().delete()

    made = proposing.propose_many(pt2, [issue.pk for issue in issues])

    assert made == 6
    pending = Proposal.objects.filter(queue=pt2, status="pending")
    assert {p.issue_id: fields(p) for p in pending} == one_by_one


def test_many_at_once_skip_decided_keep_fresh_and_supersede_stale():
    pt2 = queue("pt2")
    decided, fresh, stale, elsewhere = (make_issue(number=n) for n in range(1, 5))
    elsewhere.labels = ["oncall: distributed"]
    elsewhere.save()
    first = proposing.propose(decided, pt2)
    assert first is not None
    outbox.decide(
        first,
        kind="accept",
        user=make_user("oncall", oncall=True),
        add_labels=list(first.add_labels),
        remove_labels=[],
        comment_body="",
        close=False,
        note="",
    )
    kept = proposing.propose(fresh, pt2)
    old = proposing.propose(stale, pt2)
    assert kept is not None and old is not None
    stale.body = GRAPH_BREAK
    stale.save()

    made = proposing.propose_many(pt2, [decided.pk, fresh.pk, stale.pk, elsewhere.pk])

    assert made == 1
    old.refresh_from_db()
    assert old.status == "superseded"
    pending = Proposal.objects.filter(queue=pt2, status="pending")
    assert {p.issue_id for p in pending} == {fresh.pk, stale.pk}
    assert pending.get(issue=fresh).pk == kept.pk
    assert not Proposal.objects.filter(issue=decided, status="pending").exists()
    # Nothing changed since: a second run proposes nothing.
    assert proposing.propose_many(pt2, [decided.pk, fresh.pk, stale.pk, elsewhere.pk]) == 0


def test_an_issue_that_left_the_queue_loses_its_pending_proposal():
    pt2 = queue("pt2")
    issue = make_issue(number=1)
    proposal = proposing.propose(issue, pt2)
    assert proposal is not None
    issue.labels = ["oncall: pt2", "triaged"]
    issue.save()

    assert proposing.propose_many(pt2, [issue.pk]) == 0
    proposal.refresh_from_db()
    assert proposal.status == "withdrawn"
