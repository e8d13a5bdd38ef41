# Placeholder: being written (meetings, meeting, refresh, markdown, outcome).
from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def meetings(request: HttpRequest) -> HttpResponse:
    raise Http404


def meeting(request: HttpRequest, day: str) -> HttpResponse:
    raise Http404


def refresh(request: HttpRequest, day: str) -> HttpResponse:
    raise Http404


def markdown(request: HttpRequest, day: str) -> HttpResponse:
    raise Http404


def outcome(request: HttpRequest, day: str, pk: int) -> HttpResponse:
    raise Http404
