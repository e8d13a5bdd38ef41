"""The similar-issues panel in Debian's Chromium: the history and the open issue come from the
GitHub stand-in through the history sync and the queue's sync, the similar issues from the
worker's task (run in-process), and `d` proposes the duplicate comment that reaches GitHub."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser import log_in, settled
from tests.factories import ensure_default_queues, raw_issue
from triage.models import Proposal, Queue
from triage.tasks import sync_history, sync_queue

if TYPE_CHECKING:
    from playwright.sync_api import Page

    from triage.standins.github import GitHubStandIn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

REPO = "pytorch/pytorch"
TRACE = """
```
Traceback (most recent call last):
  File "/opt/conda/lib/python3.12/site-packages/torch/_inductor/scheduler.py", line 2101, in fuse_nodes
    nodes = self.fuse_nodes_once(nodes)
  File "/opt/conda/lib/python3.12/site-packages/torch/_inductor/codegen/triton.py", line 3310, in codegen_kernel
    code.splice(self.codegen_body())
AssertionError: fused kernel has mismatched reduction ranges
```
"""
BODY = "With torch.compile, inductor fails to fuse a softmax into a matmul epilogue." + TRACE


@pytest.fixture
def refiled(standin: GitHubStandIn, oncall: Any) -> Proposal:
    """#5001 closed and triaged long ago; #5002 files it again; #5003 is about something else."""
    queue = ensure_default_queues()
    now = timezone.now().replace(microsecond=0)
    done = ["oncall: pt2", "module: inductor", "triaged"]
    standin.add_issue(
        REPO,
        raw_issue(
            5001,
            title="Inductor: mismatched reduction ranges when fusing softmax",
            body=BODY,
            labels=done,
            state="closed",
            created=now - timedelta(days=40),
        ),
    )
    standin.add_issue(
        REPO,
        raw_issue(
            5002,
            title="inductor fusing softmax: mismatched reduction ranges",
            body=BODY,
            created=now - timedelta(hours=2),
        ),
    )
    standin.add_issue(
        REPO,
        raw_issue(
            5003,
            title="torch.compile recompiles on every call with dynamic=True",
            body="Each call recompiles; torch 2.5.",
            created=now - timedelta(hours=1),
        ),
    )
    sync_history.delay(queue.pk)
    sync_queue.delay(Queue.objects.get(slug="pt2").pk)
    return Proposal.objects.get(issue__number=5002, status=Proposal.Status.PENDING)


def test_the_similar_issues_panel_and_d_for_a_duplicate(
    page: Page, refiled: Proposal, standin: GitHubStandIn
) -> None:
    log_in(page)
    page.goto(f"/p/{refiled.pk}/")
    settled(page)

    panel = page.locator("#similar-issues")
    original = panel.locator("#similar-5001")
    expect(original.get_by_role("link", name="#5001")).to_have_attribute(
        "href", f"https://github.com/{REPO}/issues/5001"
    )
    expect(original).to_contain_text("closed")
    expect(original).to_contain_text("module: inductor")
    expect(original).to_contain_text("Not triaged here")
    expect(original).to_contain_text("torch/_inductor/scheduler.py:fuse_nodes")
    expect(panel.locator("#similar-5003")).to_be_visible()
    expect(page.locator("#possible-duplicate")).to_contain_text("Possible duplicate of #5001")
    expect(page.locator("#edit-panel")).not_to_have_attribute("open", "")

    page.keyboard.press("d")

    expect(page.locator("#edit-panel")).to_have_attribute("open", "")
    comment = page.locator("#edit-panel textarea[name=comment]")
    expect(comment).to_have_value(re.compile(r"^Duplicate of #5001\n\nThanks for the report!"))
    settled(page)
    page.locator("#edit-panel").get_by_role("button", name="Approve edit").click()

    card = page.locator(".decision-card").filter(has_text="#5002")
    expect(card).to_contain_text("Applied on GitHub")
    posted = standin.comments(REPO, 5002)
    assert posted and posted[-1]["body"].startswith("Duplicate of #5001"), posted
