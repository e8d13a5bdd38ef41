"""Finding each issue's most similar issues, by workers, and storing them for the issue page."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from triage.models import Decision, Issue, SimilarIssue

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from django.db.models import QuerySet

    from triage.similar import index as similar_index

# The index (scikit-learn, SciPy) is imported by the functions that use it, in workers: a web
# process only reads stored rows and never loads it.

log = logging.getLogger(__name__)

# How many similar issues are kept, and shown, per issue.
KEPT = 5
# One worker at a time writes a repository's index file; the others use what they have.
LOCK_SECONDS = 600


def _documents(issues: Iterable[Issue]) -> Iterator[similar_index.Document]:
    from triage.similar import index as similar_index

    for issue in issues:
        yield similar_index.Document(issue.pk, issue.title, issue.body)


def _issues(queryset: QuerySet[Issue]) -> QuerySet[Issue]:
    return queryset.only("pk", "repository", "number", "title", "body")


def rebuild(repository: str) -> similar_index.Index:
    """Build the repository's index afresh from every issue stored, and save it."""
    from triage.similar import index as similar_index

    rows = _issues(Issue.objects.filter(repository=repository)).order_by("pk")
    index = similar_index.Index.build(_documents(rows.iterator(chunk_size=2000)))
    similar_index.save(repository, index)
    log.info("similar-issue index of %s rebuilt: %d issues", repository, len(index))
    return index


def index_for(repository: str) -> similar_index.Index:
    from triage.similar import index as similar_index

    return similar_index.load(repository) or rebuild(repository)


def find(issue_ids: list[int]) -> int:
    """Find and store the most similar issues of these issues; returns how many were done.

    Their own rows in the index are refreshed first (a new issue joins it, an edited one is
    read again), so that issues synced together find each other before the next rebuild.
    """
    issues = list(_issues(Issue.objects.filter(pk__in=issue_ids)).order_by("pk"))
    by_repository: dict[str, list[Issue]] = defaultdict(list)
    for issue in issues:
        by_repository[issue.repository].append(issue)
    for repository, group in by_repository.items():
        _find_in(repository, group)
    return len(issues)


def _find_in(repository: str, issues: list[Issue]) -> None:
    from triage.similar import index as similar_index

    index, vectors = index_for(repository).upserted(list(_documents(issues)))
    lock = f"similar-index:{repository}"
    if cache.add(lock, "1", LOCK_SECONDS):
        try:
            similar_index.save(repository, index)
        finally:
            cache.delete(lock)
    found = index.nearest(vectors, [issue.pk for issue in issues], KEPT)
    # The index may still hold an issue deleted since it was built.
    wanted = {match.issue_id for matches in found for match in matches}
    existing = set(Issue.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    now = timezone.now()
    rows = []
    for issue, matches in zip(issues, found, strict=True):
        kept = [match for match in matches if match.issue_id in existing]
        rows += [
            SimilarIssue(
                issue_id=issue.pk,
                similar_id=match.issue_id,
                rank=rank,
                score=round(match.score, 4),
                shared_terms=match.shared_terms,
                shared_frames=match.shared_frames,
                computed_at=now,
            )
            for rank, match in enumerate(kept, start=1)
        ]
    with transaction.atomic():
        SimilarIssue.objects.filter(issue_id__in=[issue.pk for issue in issues]).delete()
        SimilarIssue.objects.bulk_create(rows)


def shown_for(issue: Issue) -> list[SimilarIssue]:
    """The stored similar issues of an issue, each with `decision`: the last decision made
    on it in the console (None if it was never decided here). Two queries, nothing computed."""
    rows = list(
        SimilarIssue.objects.filter(issue=issue)
        .select_related("similar")
        .defer("similar__body", "similar__comments")
        .order_by("rank")[:KEPT]
    )
    if not rows:
        return []
    latest: dict[int, Decision] = {}
    decisions = (
        Decision.objects.filter(proposal__issue_id__in=[row.similar_id for row in rows])
        .select_related("decided_by", "proposal")
        .only("kind", "decided_at", "decided_by__username", "proposal__issue_id")
        .order_by("-decided_at")
    )
    for decision in decisions:
        latest.setdefault(decision.proposal.issue_id, decision)
    for row in rows:
        row.issue = issue
        row.decision = latest.get(row.similar_id)  # type: ignore[attr-defined]
    return rows
