"""The keyboard flow of an oncall, in Debian's Chromium: inbox, issue page, a/e/x and j/k.

The app runs in pytest-django's live server; its GitHub is the HTTP stand-in; Celery tasks run
eagerly in the server's thread, so a decision's write reaches the stand-in during the request.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser import TIMEOUT_MS, log_in, settled
from tests.factories import PT2_BODY, ensure_default_queues, raw_issue
from triage.models import Proposal, Queue
from triage.tasks import sync_queue

if TYPE_CHECKING:
    from collections.abc import Callable

    from playwright.sync_api import Page

    from triage.standins.github import GitHubStandIn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

REPO = "pytorch/pytorch"
# Newest first is the inbox's default order, so the newest issue is the first row.
NUMBERS = (4103, 4102, 4101)
TITLES = {
    4103: "torch.compile graph-breaks on dict.items() in a training loop",
    4102: "Graph break on dict.items() inside a compiled optimizer step",
    4101: "dict.items() iteration is unsupported under torch.compile",
}


@pytest.fixture
def proposals(standin: GitHubStandIn, oncall: Any) -> dict[int, Proposal]:
    """Three pt2 issues on the stand-in, synced and proposed; by issue number."""
    ensure_default_queues()
    now = timezone.now().replace(microsecond=0)
    for age, number in enumerate(NUMBERS, start=1):
        created = now - timedelta(hours=age)
        standin.add_issue(
            REPO,
            raw_issue(number, title=TITLES[number], body=PT2_BODY, created=created),
        )
    sync_queue.delay(Queue.objects.get(slug="pt2").pk)
    found = {
        p.issue.number: p
        for p in Proposal.objects.filter(
            queue__slug="pt2", status=Proposal.Status.PENDING
        ).select_related("issue")
    }
    assert sorted(found) == sorted(NUMBERS), "the sync did not propose the three issues"
    for proposal in found.values():
        assert proposal.add_labels, f"the pt2 rubric proposed nothing for {proposal.issue}"
    return found


def _proposal_url(proposal: Proposal) -> re.Pattern[str]:
    return re.compile(rf"/p/{proposal.pk}/(\?|$)")


def _expect_issue(page: Page, proposal: Proposal) -> None:
    expect(page).to_have_url(_proposal_url(proposal))
    expect(page.locator("#issue h1")).to_contain_text(f"#{proposal.issue.number}")
    expect(page.locator("#issue h1")).to_contain_text(proposal.issue.title)
    settled(page)


def _wait_for(check: Callable[[], bool], what: str, timeout: float = TIMEOUT_MS / 1000) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _mark_document(page: Page) -> None:
    """Survives htmx swaps, not a full page load."""
    page.evaluate("window.__sameDocument = true")


def _same_document(page: Page) -> bool:
    return bool(page.evaluate("window.__sameDocument === true"))


def test_accept_with_a_opens_the_next_issue_and_applies_the_labels(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn
) -> None:
    first, second = proposals[NUMBERS[0]], proposals[NUMBERS[1]]
    log_in(page)
    page.goto("/q/pt2/")
    expect(page.locator("#left")).to_have_text("3 left")
    settled(page)
    page.keyboard.press("j")
    _expect_issue(page, first)
    _mark_document(page)

    page.keyboard.press("a")

    _expect_issue(page, second)
    assert _same_document(page), "accepting reloaded the whole page"
    card = page.locator(".decision-card").filter(has_text=f"#{first.issue.number}")
    expect(card).to_have_count(1)
    expect(card).to_contain_text("accepted by oncall")
    expect(card).to_contain_text("Applied on GitHub")
    expect(card.locator(".chip.add")).to_contain_text(first.add_labels)
    expect(page.locator(".issue-nav .count")).to_have_text("2 left")
    labels = standin.label_names(REPO, first.issue.number)
    assert set(first.add_labels) <= set(labels), labels
    assert "oncall: pt2" in labels
    # The next issue is untouched.
    assert standin.label_names(REPO, second.issue.number) == ["oncall: pt2"]


def test_edit_with_e_writes_exactly_the_edited_labels(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn
) -> None:
    first, second = proposals[NUMBERS[0]], proposals[NUMBERS[1]]
    dropped = first.add_labels[0]
    kept = first.add_labels[1:]
    added = "module: inductor"
    assert added not in first.add_labels
    log_in(page)
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)
    panel = page.locator("#edit-panel")
    expect(panel).not_to_have_attribute("open", re.compile(".*"))

    page.keyboard.press("e")

    expect(panel).to_have_attribute("open", "")
    label_input = panel.locator("input.chip-input")
    expect(label_input).to_be_focused()
    # The proposal's labels are there as chips.
    expect(panel.locator(".chips-editor .chip")).to_have_count(len(first.add_labels))
    # Typed letters that are also shortcuts (a, e, j, k, r, x) must go into the field.
    page.keyboard.type(added)
    expect(label_input).to_have_value(added)
    page.keyboard.press("Enter")
    expect(panel.locator(f'.chip[data-label="{added}"]')).to_have_count(1)
    # Backspace in the empty field takes the last chip away; typing it again brings it back.
    page.keyboard.press("Backspace")
    expect(panel.locator(f'.chip[data-label="{added}"]')).to_have_count(0)
    page.keyboard.type(added)
    page.keyboard.press("Enter")
    _expect_issue(page, first)
    panel.get_by_role("button", name=f"Remove {dropped}").click()
    expect(panel.locator(f'.chip[data-label="{dropped}"]')).to_have_count(0)
    panel.get_by_role("button", name="Approve edit").click()

    _expect_issue(page, second)
    card = page.locator(".decision-card").filter(has_text=f"#{first.issue.number}")
    expect(card).to_contain_text("edited by oncall")
    expect(card).to_contain_text("Applied on GitHub")
    expected = sorted({"oncall: pt2", added, *kept})
    _wait_for(
        lambda: sorted(standin.label_names(REPO, first.issue.number)) == expected,
        f"the stand-in's labels of #{first.issue.number} to become {expected}",
    )
    assert dropped not in standin.label_names(REPO, first.issue.number)


def test_j_and_k_move_between_issues_without_a_page_load(
    page: Page, proposals: dict[int, Proposal]
) -> None:
    first, second, third = (proposals[n] for n in NUMBERS)
    log_in(page)
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)
    expect(page.locator("a[rel=prev]")).to_have_count(0)
    _mark_document(page)

    page.keyboard.press("j")
    _expect_issue(page, second)
    page.keyboard.press("j")
    _expect_issue(page, third)
    expect(page.locator("a[rel=next]")).to_have_count(0)
    page.keyboard.press("k")
    _expect_issue(page, second)
    page.keyboard.press("k")
    _expect_issue(page, first)

    assert _same_document(page), "j/k reloaded the whole page instead of swapping it"
    # Nothing was decided on the way.
    assert (
        Proposal.objects.filter(pk__in=[first.pk, second.pk, third.pk])
        .filter(status=Proposal.Status.PENDING)
        .count()
        == 3
    )
    page.go_back()
    _expect_issue(page, second)


def test_escalate_with_x_adds_triage_review(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn
) -> None:
    first, second = proposals[NUMBERS[0]], proposals[NUMBERS[1]]
    log_in(page)
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)

    page.keyboard.press("x")

    panel = page.locator("#escalate-panel")
    expect(panel).to_have_attribute("open", "")
    note = panel.locator("textarea[name=note]")
    expect(note).to_be_focused()
    page.keyboard.type("Needs a dynamo owner: seen in three workloads.")
    panel.get_by_role("button", name="Approve escalation").click()

    _expect_issue(page, second)
    card = page.locator(".decision-card").filter(has_text=f"#{first.issue.number}")
    expect(card).to_contain_text("Applied on GitHub")
    labels = standin.label_names(REPO, first.issue.number)
    assert "triage review" in labels, labels
    assert set(first.add_labels) <= set(labels), labels
    expect(card).to_contain_text("Needs a dynamo owner")
    expect(card.locator(".chip.add")).to_contain_text(["triage review"])
    # The card's verb is the kind plus "ed": "escalate" must not read "escalateed".
    expect(card).to_contain_text("escalated by oncall")


def test_an_edit_that_is_refused_shows_why_and_stays_on_the_issue(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn
) -> None:
    first = proposals[NUMBERS[0]]
    log_in(page)
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)
    page.keyboard.press("e")
    page.keyboard.type("module: inductr")  # a typo: not in the pt2 vocabulary
    page.keyboard.press("Enter")  # adds it as a chip

    with page.expect_response(re.compile(rf"/p/{first.pk}/decide/")) as answer:
        page.keyboard.press("Control+Enter")

    assert answer.value.status == 422
    first.refresh_from_db()
    assert first.status == Proposal.Status.PENDING
    assert standin.writes() == []
    # htmx 2 swaps no 4xx answer unless told to (htmx.config.responseHandling), so without that
    # the page stays as it was and the reviewer never learns why nothing happened.
    expect(page.locator("#decision-error")).to_contain_text("not in the PT2 vocabulary")
    expect(page.locator("#edit-panel")).to_have_attribute("open", "")
    # What was typed is still there, as a chip, to be corrected.
    expect(page.locator('#edit-panel .chip[data-label="module: inductr"]')).to_have_count(1)
    # Still on the issue's own address, which a reload can GET (not the POST-only /decide/).
    expect(page).to_have_url(_proposal_url(first))


def test_u_undoes_an_accept_within_its_window(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn, settings: Any
) -> None:
    settings.TRIAGE_UNDO_SECONDS = 30
    first, second = proposals[NUMBERS[0]], proposals[NUMBERS[1]]
    log_in(page, "oncall")
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)

    page.keyboard.press("a")

    _expect_issue(page, second)
    card = page.locator(".decision-card").filter(has_text=f"#{first.issue.number}")
    expect(card).to_contain_text("Sending to GitHub in")
    page.keyboard.press("u")

    # Back on the undone issue, its proposal pending again; nothing reached GitHub.
    _expect_issue(page, first)
    first.refresh_from_db()
    assert first.status == Proposal.Status.PENDING
    assert standin.writes() == []


def test_question_mark_lists_the_keys_and_g_i_goes_back_to_the_inbox(
    page: Page, proposals: dict[int, Proposal]
) -> None:
    first = proposals[NUMBERS[0]]
    log_in(page)
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)

    page.keyboard.press("?")
    help_panel = page.locator("#keys-help")
    expect(help_panel).to_have_attribute("open", "")
    expect(help_panel).to_contain_text("back to the inbox")
    page.keyboard.press("?")
    expect(help_panel).not_to_have_attribute("open", "")

    page.keyboard.press("g")
    page.keyboard.press("i")
    expect(page).to_have_url(re.compile(r"/q/pt2/"))
    expect(page.locator("#left")).to_have_text("3 left")


def test_ctrl_enter_sends_a_rejection_with_its_reason(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn
) -> None:
    first, second = proposals[NUMBERS[0]], proposals[NUMBERS[1]]
    log_in(page)
    page.goto(f"/p/{first.pk}/")
    _expect_issue(page, first)

    page.keyboard.press("r")
    reason = page.locator("#reject-panel textarea")
    expect(reason).to_be_focused()
    page.keyboard.type("A duplicate of an issue already triaged.")
    page.keyboard.press("Control+Enter")

    _expect_issue(page, second)
    card = page.locator(".decision-card").filter(has_text=f"#{first.issue.number}")
    expect(card).to_contain_text("rejected by oncall")
    expect(card).to_contain_text("A duplicate of an issue already triaged.")
    assert standin.label_names(REPO, first.issue.number) == ["oncall: pt2"]


def test_slash_focuses_the_filter_and_typing_narrows_the_inbox_in_place(
    page: Page, proposals: dict[int, Proposal]
) -> None:
    log_in(page)
    page.goto("/q/pt2/")
    expect(page.locator("#left")).to_have_text("3 left")
    settled(page)
    _mark_document(page)

    page.keyboard.press("/")
    search = page.locator("#inbox-filters input[name=q]")
    expect(search).to_be_focused()
    page.keyboard.type("optimizer")

    rows = page.locator("#inbox-body tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(TITLES[4102])
    expect(page.locator("#filtered-count")).to_contain_text("1 pending issue match")
    expect(page).to_have_url(re.compile(r"q=optimizer"))
    expect(search).to_be_focused()
    assert _same_document(page), "filtering reloaded the whole page"


def test_the_inbox_follows_a_decision_taken_elsewhere_without_losing_the_filter(
    page: Page, proposals: dict[int, Proposal], settings: Any
) -> None:
    from tests.factories import make_user
    from triage import outbox

    settings.TRIAGE_INBOX_POLL_SECONDS = 1
    log_in(page)
    page.goto("/q/pt2/?q=dict")
    expect(page.locator("#inbox-body tbody tr")).to_have_count(3)
    settled(page)
    _mark_document(page)
    search = page.locator("#inbox-filters input[name=q]")
    search.focus()

    gone = proposals[NUMBERS[1]]
    outbox.decide(
        gone,
        kind="reject",
        user=make_user("alice", oncall=True),
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="duplicate",
    )

    expect(page.locator("#inbox-body tbody tr")).to_have_count(2)
    expect(page.locator("#inbox-body")).not_to_contain_text(TITLES[NUMBERS[1]])
    expect(search).to_be_focused()
    expect(search).to_have_value("dict")
    assert _same_document(page), "the inbox reloaded the whole page"


def test_bulk_accept_a_range_with_one_confirmation_and_one_undo(
    page: Page, proposals: dict[int, Proposal], standin: GitHubStandIn, settings: Any
) -> None:
    settings.TRIAGE_UNDO_SECONDS = 30
    log_in(page)
    page.goto("/q/pt2/")
    expect(page.locator("#inbox-body tbody tr")).to_have_count(3)
    settled(page)

    boxes = page.locator("#inbox-body input.select")
    boxes.nth(0).click()
    boxes.nth(2).click(modifiers=["Shift"])
    expect(boxes.nth(1)).to_be_checked()
    page.get_by_role("button", name="Preview accepting the selected").click()

    expect(page.locator("table.bulk tbody tr")).to_have_count(3)
    page.get_by_role("button", name=re.compile("Accept these 3")).click()

    expect(page.locator("#bulk-undo")).to_contain_text("3 acceptances wait to be sent")
    expect(page.locator("#queue-done")).to_be_visible()
    settled(page)
    page.keyboard.press("u")

    expect(page.locator("#inbox-body tbody tr")).to_have_count(3)
    assert all(standin.label_names(REPO, n) == ["oncall: pt2"] for n in NUMBERS)


def test_x_selects_rows_from_the_keyboard(page: Page, proposals: dict[int, Proposal]) -> None:
    log_in(page)
    page.goto("/q/pt2/")
    boxes = page.locator("#inbox-body input.select")
    rows = page.locator("#inbox-body tbody tr")
    expect(boxes).to_have_count(3)
    settled(page)

    page.keyboard.press("x")
    expect(boxes.nth(0)).to_be_checked()
    expect(rows.nth(1)).to_have_class(re.compile("current"))
    # A click moves the current row too: x goes on after the row clicked.
    boxes.nth(0).click()
    expect(boxes.nth(0)).not_to_be_checked()
    page.keyboard.press("x")
    expect(boxes.nth(1)).to_be_checked()
    page.keyboard.press("x")
    expect(boxes.nth(2)).to_be_checked()
    # At the last row x stays there: pressed again, it unselects that row.
    page.keyboard.press("x")
    expect(boxes.nth(2)).not_to_be_checked()
    page.keyboard.press("x")

    page.get_by_role("button", name="Preview accepting the selected").click()
    expect(page.locator("table.bulk tbody tr")).to_have_count(2)


def test_two_oncalls_see_each_other_and_who_decided_first(
    page: Page, browser: Any, live_server: Any, proposals: dict[int, Proposal]
) -> None:
    from tests.factories import make_user

    make_user("alice", oncall=True)
    shared = proposals[NUMBERS[0]]
    log_in(page)
    page.goto(f"/p/{shared.pk}/")
    _expect_issue(page, shared)

    size = page.viewport_size
    assert size is not None
    other = browser.new_context(base_url=live_server.url, viewport=size)
    alice = other.new_page()
    try:
        log_in(alice, "alice")
        alice.goto("/q/pt2/")
        expect(alice.locator(f"#select-{shared.pk}").locator("xpath=../..")).to_contain_text(
            "👀 oncall"
        )
        alice.goto(f"/p/{shared.pk}/")
        expect(alice.locator("#presence")).to_contain_text("Also open: oncall")
        settled(alice)
        alice.keyboard.press("a")
        expect(alice).not_to_have_url(_proposal_url(shared))
    finally:
        other.close()

    page.reload()
    expect(page.locator("#decided-by-another")).to_contain_text("alice accepted this")
