"""Forms: what users send, checked before anything acts on it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache

from triage import backlog
from triage.models import Proposal


class ThrottledAuthenticationForm(AuthenticationForm):
    """The login form, refusing a username or an address after too many wrong passwords.

    Counted per username and per client address in the shared cache (Redis when there is
    one), for LOGIN_FAILURE_WINDOW_SECONDS from the first failure. While refused, the password
    is not even checked, so guessing gains nothing.
    """

    error_messages = AuthenticationForm.error_messages | {
        "throttled": "Too many wrong passwords. Try again in %(minutes)d minutes.",
    }

    def clean(self) -> dict[str, Any]:
        keys = self._failure_keys()
        if any(cache.get(key, 0) >= settings.LOGIN_FAILURES_ALLOWED for key in keys):
            raise forms.ValidationError(
                self.error_messages["throttled"],
                code="throttled",
                params={"minutes": max(1, settings.LOGIN_FAILURE_WINDOW_SECONDS // 60)},
            )
        try:
            return super().clean()
        except forms.ValidationError:
            for key in keys:
                # add() starts the window at the first failure; incr() does not extend it.
                if not cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_SECONDS):
                    cache.incr(key)
            raise

    def _failure_keys(self) -> list[str]:
        username = str(self.data.get("username", "")).strip().lower()
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        return [f"login-failures:user:{username}"[:200], f"login-failures:addr:{address}"]


class InboxPageForm(forms.Form):
    """Which page of an inbox: its order, its filters, and the proposal the page starts after."""

    AGES = {"1": "a day", "7": "a week", "30": "a month"}

    order = forms.ChoiceField(choices=[(o, o) for o in backlog.ORDERS], required=False)
    cursor = forms.IntegerField(min_value=1, required=False)
    q = forms.CharField(max_length=200, required=False, strip=True)
    label = forms.CharField(max_length=200, required=False, strip=True)
    author = forms.CharField(max_length=100, required=False, strip=True)
    age = forms.ChoiceField(choices=[("", "any age"), *AGES.items()], required=False)
    tier = forms.ChoiceField(
        choices=[("", "any confidence"), *((t, t) for t in Proposal.Tier.values)], required=False
    )
    changes = forms.BooleanField(required=False)

    def clean_order(self) -> str:
        return self.cleaned_data["order"] or backlog.DEFAULT_ORDER

    def filters(self) -> backlog.Filters:
        data = self.cleaned_data
        return backlog.Filters(
            text=data["q"],
            label=data["label"],
            author=data["author"].lstrip("@"),
            max_age_days=int(data["age"]) if data["age"] else None,
            tier=data["tier"],
            changes_only=data["changes"],
        )


class DrillDownPageForm(forms.Form):
    """A page of a report's drill-down (the decisions before one), or all of it as CSV."""

    format = forms.ChoiceField(choices=[("csv", "csv")], required=False)
    before = forms.IntegerField(min_value=1, required=False)


class AgendaPageForm(forms.Form):
    """A page of a meeting's agenda (the items after one), and what a refresh added."""

    after = forms.IntegerField(min_value=1, required=False)
    added = forms.IntegerField(min_value=0, required=False)


class PageAfterForm(forms.Form):
    """A page of a list paged by id: the rows that come after the one named."""

    after = forms.IntegerField(min_value=1, required=False)


class DuplicateForm(forms.Form):
    """`?duplicate=N` on an issue page: the edit form filled with the duplicate comment."""

    duplicate = forms.IntegerField(min_value=1)


class IdListField(forms.Field):
    """Many ids under one name (`?p=1&p=2`), at most `MAX` of them."""

    widget = forms.MultipleHiddenInput
    MAX = 500

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        if len(value) > self.MAX:
            raise forms.ValidationError(f"At most {self.MAX} at once.")
        try:
            ids = [int(item) for item in value]
        except (TypeError, ValueError):
            raise forms.ValidationError("Ids are whole numbers.") from None
        return list(dict.fromkeys(ids))


class BulkAcceptForm(forms.Form):
    """Proposals to accept together; `high` adds every high-confidence one the inbox shows."""

    p = IdListField(required=False)
    high = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("p") and not data.get("high"):
            raise forms.ValidationError("Select at least one issue to accept.")
        return data
