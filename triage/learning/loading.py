"""The model a queue proposes with: its newest stored version, unpickled once per process."""

from __future__ import annotations

import logging
import pickle
import threading
import zlib
from collections import OrderedDict

import sklearn

from triage.learning import model as model_module
from triage.learning.proposer import Learned
from triage.models import LearnedModel, Queue

log = logging.getLogger(__name__)


def current_id(queue: Queue) -> int | None:
    """The queue's newest model that can still propose."""
    return (
        LearnedModel.objects.filter(queue=queue)
        .exclude(fitted=b"")
        .order_by("-version")
        .values_list("pk", flat=True)
        .first()
    )


# Unpickling a model costs far more than a proposal: each process keeps the last few.
_CACHE_SIZE = 4
_loaded: OrderedDict[int, Learned | None] = OrderedDict()
_lock = threading.Lock()


def load(row_id: int) -> Learned | None:
    """The stored model, ready to propose; None when it cannot be read here."""
    with _lock:
        if row_id in _loaded:
            _loaded.move_to_end(row_id)
            return _loaded[row_id]
    row = LearnedModel.objects.filter(pk=row_id).first()
    learned: Learned | None = None
    if row is not None and row.fitted:
        if row.library_version != sklearn.__version__:
            log.warning(
                "model %s was trained with scikit-learn %s, this is %s: retrain it",
                row,
                row.library_version,
                sklearn.__version__,
            )
        else:
            fitted = pickle.loads(zlib.decompress(bytes(row.fitted)))
            if getattr(fitted, "format", None) == model_module.FORMAT:
                learned = Learned(model=fitted, version=row.version, row_id=row.pk)
    with _lock:
        _loaded[row_id] = learned
        if len(_loaded) > _CACHE_SIZE:
            _loaded.popitem(last=False)
    return learned


def for_queue(queue: Queue) -> Learned | None:
    row_id = current_id(queue)
    return load(row_id) if row_id is not None else None
