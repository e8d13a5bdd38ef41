from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.factories import REPO, make_proposal, make_user, raw_issue
from triage import outbox
from triage.models import Issue, Proposal, Queue, SimilarIssue
from triage.similar import index as similar_index
from triage.similar import text
from triage.tasks import find_similar, rebuild_similar_index, sync_queue

pytestmark = pytest.mark.django_db

TRACE = """
```
Traceback (most recent call last):
  File "/opt/conda/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", line 655, in _fn
    return fn(*args, **kwargs)
  File "/opt/conda/lib/python3.12/site-packages/torch/_dynamo/symbolic_convert.py", line 812, in call_method
    unimplemented(f"call_method {self} {name}")
torch._dynamo.exc.Unsupported: call_method UserDefinedObjectVariable(items)
```
"""
GRAPH_BREAK = (
    "Compiling a training step with torch 2.5 graph-breaks when it iterates a dict with items()."
)
NCCL = (
    "Two ranks hang in all_reduce after a checkpoint is loaded; the NCCL watchdog times out "
    "after ten minutes and the job dies. Gloo works. torch 2.5, CUDA 12."
)
QUANT = (
    "Quantized conv2d gives wrong zero points on ARM when per-channel observers are used, "
    "with torch 2.5."
)


def recent(minutes_ago: int):
    return timezone.now() - timedelta(minutes=minutes_ago)


def make(number: int, title: str, body: str, **kwargs):
    return make_proposal(number=number, title=title, body=body, **kwargs)


def stored(issue) -> list[SimilarIssue]:
    return list(SimilarIssue.objects.filter(issue=issue).select_related("similar").order_by("rank"))


def test_frames_and_exception_types_are_read_from_a_traceback():
    assert text.frames(TRACE) == [
        "torch/_dynamo/eval_frame.py:_fn",
        "torch/_dynamo/symbolic_convert.py:call_method",
        "exception:torch._dynamo.exc.Unsupported",
    ]
    assert text.frame_path("C:\\Users\\me\\proj\\train.py") == "train.py"


def test_a_sync_finds_and_stores_each_issue_s_similar_issues(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(
        REPO, raw_issue(1, title="dict.items() graph break", body=GRAPH_BREAK + TRACE)
    )
    standin.add_issue(
        REPO,
        raw_issue(2, title="Graph break on dict items in compiled step", body=GRAPH_BREAK + TRACE),
    )
    standin.add_issue(REPO, raw_issue(3, title="NCCL all_reduce hangs", body=NCCL))
    standin.add_issue(REPO, raw_issue(4, title="Quantized conv2d zero points", body=QUANT))

    with django_capture_on_commit_callbacks(execute=True):
        sync_queue.delay(Queue.objects.get(slug="pt2").pk)

    second = Issue.objects.get(number=2)
    rows = stored(second)
    assert rows[0].similar.number == 1
    assert rows[0].rank == 1
    assert rows[0].score > 0.5
    assert "torch/_dynamo/symbolic_convert.py:call_method" in rows[0].shared_frames
    assert "items" in rows[0].shared_terms
    # Every stored issue was compared; the unrelated ones score far below the twin.
    assert SimilarIssue.objects.filter(issue__number=3).exists()
    assert all(row.score < rows[0].score / 2 for row in rows[1:])
    assert similar_index.path_for(REPO).exists()


def test_the_task_is_idempotent_and_sees_an_edit(django_capture_on_commit_callbacks):
    first = make(1, "dict.items() graph break", GRAPH_BREAK + TRACE).issue
    second = make(2, "NCCL all_reduce hangs", NCCL).issue
    third = make(3, "Quantized conv2d zero points", QUANT).issue
    find_similar.delay([first.pk, second.pk, third.pk])
    find_similar.delay([first.pk, second.pk, third.pk])
    assert SimilarIssue.objects.filter(issue=first).count() == 2

    # #3 is rewritten into a twin of #1: the next run finds it, without a rebuild.
    third.title, third.body = "graph break on dict.items()", GRAPH_BREAK + TRACE
    third.save()
    find_similar.delay([third.pk, first.pk])
    assert stored(first)[0].similar_id == third.pk
    assert stored(third)[0].similar_id == first.pk


def test_a_rebuild_finds_again_the_similar_issues_of_pending_issues():
    first = make(1, "dict.items() graph break", GRAPH_BREAK + TRACE)
    make(2, "NCCL all_reduce hangs", NCCL)
    assert not SimilarIssue.objects.exists()  # made without a sync: nothing found yet

    rebuild_similar_index.delay(REPO)

    assert stored(first.issue)[0].similar.number == 2
    assert len(similar_index.load(REPO) or []) == 2


def decided_twins(user):
    """#1 decided here, #2 its re-filing, both found similar by the task."""
    original = make(1, "dict.items() graph break", GRAPH_BREAK + TRACE)
    outbox.decide(
        original,
        user=user,
        kind="accept",
        add_labels=list(original.add_labels),
        remove_labels=[],
        comment_body="",
        close=False,
        note="",
    )
    refiled = make(2, "Graph break on dict.items() in a compiled step", GRAPH_BREAK + TRACE)
    others = [
        make(3 + n, title, body)
        for n, (title, body) in enumerate(
            [
                ("NCCL all_reduce hangs", NCCL),
                ("Quantized conv2d zero points", QUANT),
                ("NCCL timeout after checkpoint load", NCCL + " It also fails on 2 nodes."),
                ("ARM conv2d per-channel", QUANT + " Also on x86."),
            ]
        )
    ]
    find_similar.delay([p.issue_id for p in [original, refiled, *others]])
    return original, refiled


def test_the_issue_page_shows_stored_similar_issues_and_never_computes(client, oncall):
    _, refiled = decided_twins(oncall)
    client.force_login(oncall)
    # The index is gone: a page that computed would need it.
    shutil.rmtree(similar_index.path_for(REPO).parent)

    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("proposal", args=[refiled.pk]))
    page = response.content.decode()

    assert response.status_code == 200
    assert not similar_index.path_for(REPO).exists()
    # The issue page's 11, then the similar issues and their last decisions.
    assert len(queries) == 13
    panel = page.split('id="similar-issues"')[1].split("</section>")[0]
    assert panel.count('class="similar-issue') == 5
    first = panel.split('id="similar-1"')[1].split("</div>")[0]
    assert f'<a href="https://github.com/{REPO}/issues/1" rel="noopener">#1</a>' in first
    assert "Accepted here by oncall" in first
    assert "open" in first
    assert "oncall: pt2" in first
    assert "torch/_dynamo/symbolic_convert.py:call_method" in first
    assert "Not triaged here" in panel


def test_an_unsafe_url_of_a_similar_issue_is_no_link(client, oncall):
    original, refiled = decided_twins(oncall)
    Issue.objects.filter(pk=original.issue_id).update(html_url="javascript:alert(1)")
    client.force_login(oncall)
    page = client.get(reverse("proposal", args=[refiled.pk])).content.decode()
    assert "javascript:" not in page
    assert 'id="similar-1"' in page


def test_a_very_close_earlier_issue_is_a_possible_duplicate(client, oncall, settings):
    settings.TRIAGE_DUPLICATE_SCORE = 0.65
    original, refiled = decided_twins(oncall)
    client.force_login(oncall)

    page = client.get(reverse("proposal", args=[refiled.pk])).content.decode()
    assert "Possible duplicate of" in page
    assert 'data-key="d"' in page
    # The earlier issue is the original, not a duplicate of the later one.
    assert (
        "Possible duplicate"
        not in client.get(reverse("proposal", args=[original.pk])).content.decode()
    )

    settings.TRIAGE_DUPLICATE_SCORE = 0.999
    assert (
        "Possible duplicate"
        not in client.get(reverse("proposal", args=[refiled.pk])).content.decode()
    )


def test_d_fills_the_edit_form_with_the_duplicate_comment(client, oncall):
    _, refiled = decided_twins(oncall)
    client.force_login(oncall)
    url = reverse("proposal", args=[refiled.pk])

    page = client.get(url, {"duplicate": 1}).content.decode()

    edit = page.split('id="edit-panel"')[1].split("</details>")[0]
    assert edit.startswith(" open")
    assert "Duplicate of #1\n\nThanks for the report! This looks like the same problem" in edit
    assert 'value="Possible duplicate of #1"' in edit
    assert "signed out" not in page
    # Only one of the issue's similar issues, by number.
    assert client.get(url, {"duplicate": 99}).status_code == 400
    assert client.get(url, {"duplicate": "x"}).status_code == 400


def test_a_viewer_sees_the_marker_but_no_way_to_propose(client, oncall):
    _, refiled = decided_twins(oncall)
    client.force_login(make_user("reader", oncall=False))
    page = client.get(reverse("proposal", args=[refiled.pk])).content.decode()
    assert "Possible duplicate of" in page
    assert 'data-key="d"' not in page


def test_an_issue_without_similar_issues_says_so(client, oncall):
    proposal = make(1, "dict.items() graph break", GRAPH_BREAK)
    client.force_login(oncall)
    page = client.get(reverse("proposal", args=[proposal.pk])).content.decode()
    assert "None found yet" in page
    assert Proposal.objects.count() == 1
