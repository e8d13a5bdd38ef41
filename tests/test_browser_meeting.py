"""The triage-review meeting in Debian's Chromium: open the agenda, record an outcome, approve it,
and see it on the GitHub stand-in.

The app runs in pytest-django's live server; its GitHub is the HTTP stand-in; Celery tasks run
eagerly in the server's thread, so the outcome's write reaches the stand-in during the request.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser import log_in, settled
from tests.factories import ensure_default_queues, raw_issue
from triage.models import AgendaItem, Queue
from triage.tasks import sync_queue

if TYPE_CHECKING:
    from playwright.sync_api import Page

    from triage.standins.github import GitHubStandIn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

REPO = "pytorch/pytorch"
NUMBER = 4301
CRASH_BODY = """Segmentation fault (core dumped) when compiling.

```python
import torch
torch.compile(lambda x: x.sin())(torch.randn(3))
```
"""


@pytest.fixture
def labelled_on_github(standin: GitHubStandIn, oncall: Any) -> None:
    """A pt2 crash someone labelled `triage review` on GitHub, synced into the console."""
    ensure_default_queues()
    standin.add_issue(
        REPO,
        raw_issue(
            NUMBER,
            title="Segfault when compiling sin",
            body=CRASH_BODY,
            labels=["oncall: pt2", "triage review"],
            created=timezone.now().replace(microsecond=0),
        ),
    )
    sync_queue.delay(Queue.objects.get(slug="pt2").pk)


def test_a_high_priority_outcome_is_approved_and_applied(
    page: Page, labelled_on_github: None, standin: GitHubStandIn
) -> None:
    log_in(page)
    page.get_by_role("link", name="Triage review").click()
    expect(page.locator("h1")).to_have_text("Triage review meetings")
    day = page.locator("input[name=date]").input_value()
    page.get_by_role("button", name="Open the agenda").click()

    expect(page).to_have_url(re.compile(rf"/meetings/{day}/$"))
    expect(page.locator("h1")).to_have_text(f"Triage review {day}")
    settled(page)
    item = page.locator(".agenda-item").filter(has_text=f"#{NUMBER}")
    expect(item).to_have_count(1)
    expect(item).to_contain_text("labelled `triage review` on GitHub")
    assert standin.writes() == [], "something was written before the facilitator approved"

    item.locator("select[name=outcome]").select_option("high priority")
    item.locator("input[name=owner]").fill("alice")
    item.locator("textarea[name=note]").fill("Seen in three HF models.")
    page.evaluate("window.__sameDocument = true")
    item.get_by_role("button", name="Approve").click()

    expect(item).to_contain_text("High priority confirmed, owner @alice")
    expect(item).to_contain_text("Applied on GitHub")
    expect(item.locator(".write-state .chip.add")).to_have_text(["high priority"])
    expect(item.locator(".write-state .chip.remove")).to_have_text(["triage review"])
    assert page.evaluate("window.__sameDocument === true"), "approving reloaded the whole page"
    labels = standin.label_names(REPO, NUMBER)
    assert "high priority" in labels, labels
    assert "triage review" not in labels, labels
    comments = standin.comments(REPO, NUMBER)
    assert len(comments) == 1
    assert comments[0]["body"].startswith(
        f"Triage review {day}: high priority, owner @alice. Seen in three HF models."
    )
    assert AgendaItem.objects.get(issue__number=NUMBER).status == AgendaItem.Status.DECIDED
