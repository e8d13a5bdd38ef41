"""The console's views, one module per area: console (inbox, issue, decisions), rotation,
agenda (the triage-review meeting) and reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
