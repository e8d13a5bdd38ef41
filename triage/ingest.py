"""Turning issues in GitHub's REST shape into rows, from a sync or from an offline file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from triage.models import Issue

if TYPE_CHECKING:
    from datetime import datetime

REQUIRED = ("number", "title", "state", "created_at", "updated_at")


class IssueFormatError(ValueError):
    pass


@dataclass(frozen=True)
class IssueFields:
    number: int
    title: str
    body: str
    state: str
    author: str
    html_url: str
    labels: list[str]
    comments: list[dict[str, Any]] | None  # None: the source did not carry them
    created_at: datetime
    updated_at: datetime

    def as_model_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "title": self.title,
            "body": self.body,
            "state": self.state,
            "author": self.author,
            "html_url": self.html_url,
            "labels": self.labels,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.comments is not None:
            fields["comments"] = self.comments
        return fields


def _timestamp(raw: dict[str, Any], key: str) -> datetime:
    value = raw.get(key)
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise IssueFormatError(
            f"{key!r} must be an ISO 8601 timestamp with a time zone, got {value!r}"
        )
    return parsed


def _login(user: Any) -> str:
    if isinstance(user, dict):
        return str(user.get("login") or "")
    return ""


def _label_name(label: Any) -> str:
    if isinstance(label, str):
        return label
    if isinstance(label, dict) and isinstance(label.get("name"), str):
        return str(label["name"])
    raise IssueFormatError(f"a label must be a name or an object with a name, got {label!r}")


def comment(raw: Any, strict: bool = False) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("body", ""), str):
        raise IssueFormatError(f"a comment must be an object with a body, got {raw!r:.80}")
    if not isinstance(raw.get("id"), int):
        raise IssueFormatError("a comment needs an integer 'id'")
    return {
        "id": raw["id"],
        "author": storable(_login(raw.get("user")), "a comment's login", strict=strict),
        "body": storable(raw.get("body") or "", f"comment {raw['id']}", strict=strict),
        "created_at": str(raw.get("created_at") or ""),
    }


# What the issues table holds (models.Issue); longer values are refused, not cut.
MAX_TITLE = 1000
MAX_LOGIN = 100
MAX_URL = 500
MAX_NUMBER = 2**31 - 1


def storable(text: str, field: str = "", *, strict: bool = False) -> str:
    """Text PostgreSQL can store: no NUL characters, no lone surrogates.

    A sync cleans what GitHub sends; an import (`strict`) refuses it, saying where.
    """
    if "\x00" in text:
        if strict:
            raise IssueFormatError(f"{field} holds a NUL character")
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        if strict:
            raise IssueFormatError(f"{field} holds a lone surrogate (not valid Unicode)") from None
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def parse(raw: Any, comments: list[Any] | None = None, *, strict: bool = False) -> IssueFields:
    """Validate one issue object; `comments` overrides a `comments` list inside it.

    `strict` refuses text PostgreSQL cannot store instead of cleaning it.
    """
    if not isinstance(raw, dict):
        raise IssueFormatError("an issue must be a JSON object")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise IssueFormatError(f"missing field {missing[0]!r}")
    number = raw["number"]
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= MAX_NUMBER:
        raise IssueFormatError(
            f"'number' must be an integer from 1 to {MAX_NUMBER}, got {number!r:.40}"
        )
    if not isinstance(raw["title"], str):
        raise IssueFormatError("'title' must be a string")
    if len(raw["title"]) > MAX_TITLE:
        raise IssueFormatError(f"'title' is longer than {MAX_TITLE} characters")
    author = _login(raw.get("user"))
    if len(author) > MAX_LOGIN:
        raise IssueFormatError(f"the author's login is longer than {MAX_LOGIN} characters")
    html_url = str(raw.get("html_url") or "")
    if len(html_url) > MAX_URL:
        raise IssueFormatError(f"'html_url' is longer than {MAX_URL} characters")
    if raw.get("body") is not None and not isinstance(raw["body"], str):
        raise IssueFormatError("'body' must be a string or null")
    if raw["state"] not in ("open", "closed"):
        raise IssueFormatError(f"'state' must be 'open' or 'closed', got {raw['state']!r}")
    labels = raw.get("labels") or []
    if not isinstance(labels, list):
        raise IssueFormatError("'labels' must be a list")
    if comments is None and isinstance(raw.get("comments"), list):
        comments = raw["comments"]
    return IssueFields(
        number=number,
        title=storable(raw["title"], "'title'", strict=strict),
        body=storable(raw.get("body") or "", "'body'", strict=strict),
        state=raw["state"],
        author=storable(author, "the author's login", strict=strict),
        html_url=storable(html_url, "'html_url'", strict=strict),
        labels=sorted({_label_name(label) for label in labels}),
        comments=None if comments is None else [comment(c, strict) for c in comments],
        created_at=_timestamp(raw, "created_at"),
        updated_at=_timestamp(raw, "updated_at"),
    )


def upsert(repository: str, fields: IssueFields) -> tuple[Issue, bool]:
    """Create or update the issue; True when anything a proposal looks at changed.

    Two syncs over one repository may meet on a new issue: get_or_create reads the row the
    other one committed instead of failing on the unique key.
    """
    values = fields.as_model_fields()
    issue, created = Issue.objects.get_or_create(
        repository=repository, number=fields.number, defaults={"comments": []} | values
    )
    if created:
        return issue, True
    before = issue.content_hash
    changed_any = False
    for key, value in values.items():
        if getattr(issue, key) != value:
            setattr(issue, key, value)
            changed_any = True
    if changed_any:
        issue.save()
    return issue, issue.content_hash != before


def upsert_many(repository: str, batch: list[IssueFields]) -> list[tuple[Issue, bool, bool]]:
    """`upsert` for a batch of distinct issues in three queries: each issue, whether it was
    created, and whether its content changed (a created one's did)."""
    if not batch:
        return []
    existing = {
        issue.number: issue
        for issue in Issue.objects.filter(
            repository=repository, number__in=[fields.number for fields in batch]
        )
    }
    stored: list[tuple[Issue, bool, bool]] = []
    fresh: list[Issue] = []
    edited: list[Issue] = []
    for fields in batch:
        values = fields.as_model_fields()
        issue = existing.get(fields.number)
        if issue is None:
            issue = Issue(
                repository=repository, number=fields.number, **({"comments": []} | values)
            )
            fresh.append(issue)
            stored.append((issue, True, True))
            continue
        before = issue.content_hash
        if any(getattr(issue, key) != value for key, value in values.items()):
            for key, value in values.items():
                setattr(issue, key, value)
            edited.append(issue)
        stored.append((issue, False, issue.content_hash != before))
    # On PostgreSQL and SQLite bulk_create sets the new rows' ids on the objects.
    Issue.objects.bulk_create(fresh)
    if edited:
        now = timezone.now()
        for issue in edited:
            issue.synced_at = now
        Issue.objects.bulk_update(edited, STORED_FIELDS)
    return stored


# Every field an issue's fields set (`as_model_fields`), and when it was last stored.
STORED_FIELDS = [
    "title",
    "body",
    "state",
    "author",
    "html_url",
    "labels",
    "comments",
    "created_at",
    "updated_at",
    "synced_at",
]
