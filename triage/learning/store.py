"""A queue's trained models in the database: the examples they learn from, their versions.

A queue learns from the labelled examples of its repository (triage.history.examples: issues
the history sync read closed or triaged, and issues whose approved decision wrote their final
labels) whose final labels carry the queue's.
"""

from __future__ import annotations

import hashlib
import pickle
import zlib
from typing import TYPE_CHECKING

import sklearn
from django.db import transaction

from triage.backtest import closure
from triage.history import examples as history_examples
from triage.learning import model as model_module
from triage.learning import training
from triage.models import Issue, LearnedModel, Queue
from triage.rubric import loader

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from triage.learning.model import Model

DATABASE = "database"
# Older versions keep their row (proposals name them) but not their fitted model.
VERSIONS_KEPT = 3


def examples(queue: Queue) -> Iterator[training.Example]:
    """The queue's labelled issues in the database (triage.history.examples says which are),
    oldest number first: those whose final labels carry the queue's."""
    required = set(queue.require_labels)
    chosen = sorted(
        (example.number, example.issue_id, example.labels)
        for example in history_examples.labelled(queue.repository)
        if required <= closure(example.labels)
    )
    for at in range(0, len(chosen), 500):
        batch = chosen[at : at + 500]
        issues = Issue.objects.in_bulk([issue_id for _, issue_id, _ in batch])
        for _, issue_id, labels in batch:
            yield training.Example(issues[issue_id].as_input(), frozenset(labels))


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
