# Placeholder: being written (report, decisions).
from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def report(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404


def decisions(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404
