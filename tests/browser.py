"""What the Playwright tests share: how Chromium is started and how a test waits for htmx."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = os.environ.get("PLAYWRIGHT_CHROMIUM", "/usr/bin/chromium")
# Without these, Debian's Chromium reaches for Google's services, which this network refuses.
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


def log_in(page: Page, username: str = "oncall") -> None:
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("header.top .who")).to_have_text(f"{username} · oncall")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def settled(page: Page) -> None:
    """htmx boosts swapped-in links and forms only when it settles (20 ms after the swap): a key
    pressed before then follows a plain link and loads the whole page."""
    page.wait_for_function(f"() => window.htmx && !document.querySelector('{HTMX_BUSY}')")
