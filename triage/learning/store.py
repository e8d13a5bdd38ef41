"""A queue's trained models in the database: the examples they learn from, their versions.

A labelled example is an issue whose labels are final: a closed issue of the queue's
repository that was in the queue (its final labels carry the queue's), or an open issue whose
decision in the console was approved (its final labels are what the decision wrote).
"""

from __future__ import annotations

import hashlib
import pickle
import zlib
from typing import TYPE_CHECKING

import sklearn
from django.db import transaction

from triage.backtest import closure
from triage.learning import model as model_module
from triage.learning import training
from triage.models import Decision, Issue, LearnedModel, Queue
from triage.rubric import loader

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from triage.learning.model import Model

DATABASE = "database"
# Older versions keep their row (proposals name them) but not their fitted model.
VERSIONS_KEPT = 3
APPROVED = (Decision.Kind.ACCEPT, Decision.Kind.EDIT, Decision.Kind.ESCALATE)


def examples(queue: Queue) -> Iterator[training.Example]:
    """The queue's labelled issues in the database, oldest number first."""
    required = set(queue.require_labels)
    closed = Issue.objects.filter(repository=queue.repository, state="closed").order_by("number")
    for issue in closed.iterator(chunk_size=500):
        if required <= closure(issue.labels):
            yield training.Example(issue.as_input(), frozenset(issue.labels))
    latest: dict[int, Decision] = {}
    decisions = (
        Decision.objects.filter(proposal__queue=queue, proposal__issue__state="open")
        .exclude(write__state__in=["conflict", "withdrawn"])
        .select_related("proposal__issue")
        .order_by("decided_at", "pk")
    )
    for decision in decisions.iterator(chunk_size=500):
        latest[decision.proposal.issue_id] = decision
    for decision in sorted(latest.values(), key=lambda d: d.proposal.issue.number):
        if decision.kind not in APPROVED:
            continue
        proposal = decision.proposal
        final = (set(proposal.labels_seen) | set(decision.add_labels)) - set(decision.remove_labels)
        yield training.Example(proposal.issue.as_input(), frozenset(final))


def fingerprint(examples: Sequence[training.Example], rubric_labels: Sequence[str]) -> str:
    digest = hashlib.sha256()
    digest.update(f"{model_module.FORMAT}\0{sklearn.__version__}\0".encode())
    digest.update("\0".join(rubric_labels).encode() + b"\1")
    for example in examples:
        issue = example.issue
        for part in (str(issue.number), issue.title, issue.body, *sorted(example.labels)):
            digest.update(part.encode() + b"\0")
        for _, comment in issue.comments:
            digest.update(comment.encode() + b"\0")
        digest.update(b"\1")
    return digest.hexdigest()


def serialize(model: Model) -> bytes:
    return zlib.compress(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL), level=1)


def train(
    queue: Queue, labelled: Sequence[training.Example] | None = None, source: str = DATABASE
) -> tuple[LearnedModel, bool]:
    """Train a new version for the queue; (the version, whether it is new).

    The same examples and vocabulary as the latest version's make no new version. Raises
    `training.TrainingError` when there is too little to learn from.
    """
    rubric = loader.load(queue.rubric)
    labelled = list(examples(queue)) if labelled is None else list(labelled)
    printed = fingerprint(labelled, training.learnable(rubric))
    latest = LearnedModel.objects.filter(queue=queue).order_by("-version").first()
    if latest is not None and latest.fingerprint == printed and latest.fitted:
        return latest, False
    fitted = training.train(labelled, rubric)
    blob = serialize(fitted)
    with transaction.atomic():
        # One version number at a time per queue, whoever else trains it now.
        Queue.objects.select_for_update().filter(pk=queue.pk).first()
        latest = LearnedModel.objects.filter(queue=queue).order_by("-version").first()
        if latest is not None and latest.fingerprint == printed and latest.fitted:
            # Another worker trained on the same examples meanwhile.
            return latest, False
        version = (latest.version if latest is not None else 0) + 1
        row = LearnedModel.objects.create(
            queue=queue,
            version=version,
            examples=len(labelled),
            source=source[:200],
            fingerprint=printed,
            rubric_version=rubric.version,
            labels=list(fitted.labels),
            metrics=fitted.metrics,
            library_version=sklearn.__version__,
            fitted=blob,
        )
        LearnedModel.objects.filter(queue=queue, version__lte=version - VERSIONS_KEPT).update(
            fitted=b""
        )
    return row, True
