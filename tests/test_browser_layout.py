"""Every page fits the screen, from a laptop to a phone: no page scrolls sideways.

With SCREENSHOTS_DIR set, the inbox, an issue and the report are saved there at both sizes
(`docs/screenshots/` holds the ones the README shows).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.browser import TIMEOUT_MS, log_in
from tests.factories import ensure_default_queues, make_proposal
from triage import agenda, outbox

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SIZES = {"laptop": (1280, 800), "phone": (390, 844)}
# What widens a page on a phone: an unbroken traceback line, a wide table, many labels.
WIDE_BODY = (
    "### 🐛 Describe the bug\n\nInductor fails on CUDA with a long path:\n\n```\n"
    'File "/opt/conda/lib/python3.12/site-packages/torch/_inductor/codegen/triton.py", '
    "line 1234, in codegen_kernel_with_a_rather_long_name_that_never_breaks_anywhere_at_all\n"
    "torch._inductor.exc.InductorError: " + "x" * 300 + "\n```\n\n"
    "| model | eager | aot_eager | inductor | dynamic | mode | speedup | notes |\n"
    "|---|---|---|---|---|---|---|---|\n"
    "| hf_Bert_large_with_a_long_name | ok | ok | fails | True | max-autotune | 0.93 | "
    "see https://github.com/pytorch/pytorch/issues/123456789 |\n"
)


@pytest.fixture
def console_with_history(oncall: Any) -> dict[str, Any]:
    ensure_default_queues()
    labels = ["oncall: pt2", "module: inductor", "module: dynamic shapes", "module: cuda graphs"]
    shown = make_proposal(number=5001, title="Inductor " + "fails " * 30, body=WIDE_BODY)
    make_proposal(number=5002, labels=labels, body=WIDE_BODY)
    for number in range(5003, 5008):
        proposal = make_proposal(number=number, body=WIDE_BODY)
        outbox.decide(
            proposal,
            kind=("accept", "edit", "escalate", "reject", "accept")[number % 5],
            user=oncall,
            add_labels=["module: inductor", "module: dynamic shapes", "triage review"],
            remove_labels=[],
            comment_body="",
            close=False,
            note="seen in three models",
        )
    meeting = agenda.open_meeting(timezone.localdate())
    agenda.build(meeting)
    return {"proposal": shown, "meeting": meeting}


def pages(data: dict[str, Any]) -> dict[str, str]:
    proposal = data["proposal"]
    return {
        "home": reverse("home") + "?all",
        "inbox": reverse("inbox", args=["pt2"]),
        "issue": reverse("proposal", args=[proposal.pk]),
        "history": reverse("history", args=[proposal.issue_id]),
        "decided": reverse("decided", args=["pt2"]),
        "report": reverse("report", args=["pt2"]) + "?backtest=1",
        "drill-down": reverse("report-decisions", args=["pt2"]),
        "meeting": reverse("meeting", args=[data["meeting"].date.isoformat()]),
        "meetings": reverse("meetings"),
        "rotation": reverse("rotation", args=["pt2"]),
    }


@pytest.mark.parametrize("size", SIZES)
def test_no_page_scrolls_sideways(
    browser: Browser, live_server: Any, console_with_history: dict[str, Any], size: str
) -> None:
    width, height = SIZES[size]
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": width, "height": height}
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    shots = os.environ.get("SCREENSHOTS_DIR")
    try:
        log_in(page)
        too_wide = {}
        for name, url in pages(console_with_history).items():
            page.goto(url)
            page.wait_for_load_state("networkidle")
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            if scroll_width > width:
                too_wide[name] = scroll_width
            if shots and name in ("inbox", "issue", "report"):
                Path(shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=f"{shots}/{name}-{size}.png", full_page=False)
        assert too_wide == {}, f"wider than the {width} px screen: {too_wide}"
        # The header holds on one or two lines, not three.
        header_height = page.evaluate("document.querySelector('header.top').offsetHeight")
        assert header_height < 90, header_height
    finally:
        context.close()
