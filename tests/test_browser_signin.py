"""Sign in with GitHub in Chromium, at a laptop's size and a phone's: through the stand-in's
authorize page and back, deciding only in the queue of one's team."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import expect

from tests.browser import TIMEOUT_MS
from tests.factories import ensure_default_queues, make_proposal
from triage.models import Queue

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SIZES = {"laptop": (1280, 800), "phone": (390, 844)}


@pytest.fixture
def github(standin: Any, settings: Any) -> Any:
    settings.GITHUB_WEB_URL = standin.url
    settings.GITHUB_ORG = "pytorch"
    settings.SOCIALACCOUNT_PROVIDERS = {
        "github": {
            **settings.SOCIALACCOUNT_PROVIDERS["github"],
            "APPS": [{"client_id": standin.oauth_client_id, "secret": standin.oauth_client_secret}],
        }
    }
    # As settings does with an OAuth app: the sign-in form may lead to GitHub.
    settings.SECURE_CSP = {
        **settings.SECURE_CSP,
        "form-action": [*settings.SECURE_CSP["form-action"], standin.url],
    }
    ensure_default_queues()
    Queue.objects.filter(slug="pt2").update(github_team="pytorch/pt2-oncall")
    make_proposal("pt2")
    make_proposal("distributed", labels=["oncall: distributed"])
    return standin


def tab(browser: Browser, live_server: Any, size: str) -> Page:
    width, height = SIZES[size]
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": width, "height": height}
    )
    context.set_default_timeout(TIMEOUT_MS)
    return context.new_page()


def fits(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


@pytest.mark.parametrize("size", SIZES)
def test_a_team_member_signs_in_with_github_and_decides_in_the_team_queue(
    browser: Browser, live_server: Any, github: Any, size: str
) -> None:
    github.add_member("pytorch", "octo-oncall", teams=["pt2-oncall"])
    github.sign_in_as("octo-oncall")
    page = tab(browser, live_server, size)
    page.goto("/login/")
    assert fits(page)
    page.get_by_role("button", name="Sign in with GitHub").click()
    expect(page.locator("header.top .who")).to_have_text("octo-oncall · oncall")

    page.goto("/q/pt2/")
    expect(page.locator("input.select").first).to_be_visible()
    expect(page.get_by_role("button", name="Sync now")).to_be_visible()
    assert fits(page)
    page.goto("/q/distributed/")
    expect(page.locator("#inbox-body")).to_be_visible()
    expect(page.locator("input.select")).to_have_count(0)
    expect(page.get_by_role("button", name="Sync now")).to_have_count(0)
    page.context.close()


@pytest.mark.parametrize("size", SIZES)
def test_someone_outside_the_organisation_is_told_why_they_cannot_get_in(
    browser: Browser, live_server: Any, github: Any, size: str
) -> None:
    github.sign_in_as("stranger")
    page = tab(browser, live_server, size)
    page.goto("/login/")
    page.get_by_role("button", name="Sign in with GitHub").click()
    expect(page.locator("#signin-error")).to_contain_text(
        "@stranger is not a member of the pytorch organisation"
    )
    expect(page).to_have_url(re.compile(r"/accounts/github/login/callback/"))
    assert fits(page)
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/"))
    page.context.close()
