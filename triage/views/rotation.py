# Placeholder: being written (schedule, assign, generate, swap, handoff).
from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def schedule(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404


def assign(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404


def generate(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404


def swap(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404


def handoff(request: HttpRequest, slug: str) -> HttpResponse:
    raise Http404
