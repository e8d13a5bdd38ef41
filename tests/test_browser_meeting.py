"""The triage-review meeting in Debian's Chromium: open the agenda, record an outcome, approve it,
and see it on the GitHub stand-in.

The app runs in pytest-django's live server; its GitHub is the HTTP stand-in; Celery tasks run
eagerly in the server's thread, so the outcome's write reaches the stand-in during the request.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import TYPE_CHECKING, Any

import pytest
from django.apps import apps
from django.utils import timezone
from playwright.sync_api import expect, sync_playwright

from tests.factories import raw_issue
from triage.models import AgendaItem, Queue
from triage.tasks import sync_queue

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, Page

    from triage.standins.github import GitHubStandIn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

REPO = "pytorch/pytorch"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
TIMEOUT_MS = 10_000
# Classes htmx puts on content while it swaps it in and settles it.
HTMX_BUSY = ".htmx-added, .htmx-settling, .htmx-swapping"
NUMBER = 4301
CRASH_BODY = """Segmentation fault (core dumped) when compiling.

```python
import torch
torch.compile(lambda x: x.sin())(torch.randn(3))
```
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Playwright's sync API keeps an event loop on this thread, which makes Django refuse ORM
    # calls here; the tests' own ORM calls are synchronous all the same.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=os.environ.get("PLAYWRIGHT_CHROMIUM", "/usr/bin/chromium"),
                headless=True,
                args=CHROMIUM_ARGS,
            )
            yield chromium
            chromium.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def _ensure_default_queues() -> None:
    """A flush by an earlier transactional test may have removed the migration's rows."""
    migration = importlib.import_module("triage.migrations.0002_default_queues")
    if not Queue.objects.filter(slug="pt2").exists():
        migration.create_queues(apps, None)


@pytest.fixture
def labelled_on_github(standin: GitHubStandIn, oncall: Any) -> None:
    """A pt2 crash someone labelled `triage review` on GitHub, synced into the console."""
    _ensure_default_queues()
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


def _log_in(page: Page) -> None:
    page.goto("/login/")
    page.fill("#id_username", "oncall")
    page.fill("#id_password", "pw")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("header.top .who")).to_have_text("oncall · oncall")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def _settled(page: Page) -> None:
    page.wait_for_function(f"() => window.htmx && !document.querySelector('{HTMX_BUSY}')")


def test_a_high_priority_outcome_is_approved_and_applied(
    page: Page, labelled_on_github: None, standin: GitHubStandIn
) -> None:
    _log_in(page)
    page.get_by_role("link", name="Triage review").click()
    expect(page.locator("h1")).to_have_text("Triage review meetings")
    day = page.locator("input[name=date]").input_value()
    page.get_by_role("button", name="Open the agenda").click()

    expect(page).to_have_url(re.compile(rf"/meetings/{day}/$"))
    expect(page.locator("h1")).to_have_text(f"Triage review {day}")
    _settled(page)
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
