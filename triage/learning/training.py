"""Fitting a queue's classifier on issues whose labels are final.

One linear SVM per label of the rubric's vocabulary (one-vs-rest) over TF-IDF features, its
scores turned into probabilities by Platt's sigmoid fitted on out-of-fold scores (what
scikit-learn's `CalibratedClassifierCV(method="sigmoid", ensemble=False)` does). The same
out-of-fold probabilities give the model's metrics at no extra cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.svm import LinearSVC

from triage.backtest import closure, escalated
from triage.learning import features
from triage.learning.model import BLOCKS, Model, prune

if TYPE_CHECKING:
    from collections.abc import Sequence

    from triage.rubric.engine import IssueInput
    from triage.rubric.loader import Rubric

# A label with fewer examples on either side is not learned: its probabilities would be noise.
MIN_POSITIVES = 5
FOLDS = 3
# The SVM's regularisation, chosen by cross-validation on the tune split of the real index.
C = 0.5
# A word or a token: letters, digits, `_` and inner dots (`torch.compile`, `torch._dynamo`).
WORD = r"(?u)\b[^\W\d][\w.]*\w\b"
MAX_TEXT_FEATURES = 100_000
# With fewer issues than this, a term seen once is kept: otherwise little would be left.
SMALL = 100
# The probability above which a label counts as proposed in the training metrics.
METRIC_THRESHOLD = 0.5
# The model proposes a label on its own from the lowest of these probabilities at which its
# out-of-fold precision, smoothed as (right + 1) / (proposed + 2), reaches the target.
GATES = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
PRECISION_TARGET = 0.75


@dataclass(frozen=True, slots=True)
class Example:
    """An issue and the labels humans left on it."""

    issue: IssueInput
    labels: frozenset[str]


class TrainingError(ValueError):
    pass


def learnable(rubric: Rubric) -> list[str]:
    """The labels the model may learn: the rubric's vocabulary, less what only humans decide."""
    return sorted(rubric.vocabulary.allowed - rubric.vocabulary.forbidden - {"high priority"})


def targets(example: Example) -> set[str]:
    """The labels an issue ended with, read as the backtest reads them."""
    return closure(escalated(example.labels))


def _vectorizers(count: int) -> dict[str, TfidfVectorizer]:
    min_df = 1 if count < SMALL else 2
    words: dict[str, Any] = {
        "token_pattern": WORD,
        "stop_words": "english",
        "sublinear_tf": True,
        "dtype": np.float32,
    }
    # Word pairs in the title only: in the body they would double the cost of proposing.
    return {
        "title": TfidfVectorizer(min_df=min_df, ngram_range=(1, 2), **words),
        "text": TfidfVectorizer(min_df=min_df, max_df=0.5, max_features=MAX_TEXT_FEATURES, **words),
        "structure": TfidfVectorizer(
            tokenizer=str.split,
            token_pattern=None,
            lowercase=False,
            min_df=min_df,
            sublinear_tf=True,
            dtype=np.float32,
        ),
    }


def _fit_vectorizers(
    documents: Sequence[features.Document],
) -> tuple[dict[str, TfidfVectorizer], sp.csr_matrix]:
    vectorizers = _vectorizers(len(documents))
    blocks = []
    for block in BLOCKS:
        texts = [getattr(document, block) for document in documents]
        try:
            blocks.append(vectorizers[block].fit_transform(texts))
        except ValueError:
            # Nothing in this block survived (no traceback in any issue, say): a block that
            # maps every issue to zero keeps the shapes the same.
            vectorizers[block].set_params(min_df=1, max_df=1.0, stop_words=None)
            vectorizers[block].fit(["none"])
            blocks.append(vectorizers[block].transform(texts))
    return vectorizers, sp.hstack(blocks, format="csr", dtype=np.float32)


def classifier(c: float) -> LinearSVC:
    # A looser stopping tolerance than scikit-learn's 1e-4: three times faster, and the same
    # cross-validated scores on the real index's tune split.
    return LinearSVC(C=c, tol=1e-2)


def gate(probability: np.ndarray[Any, Any], y: np.ndarray[Any, Any], target: float) -> float:
    """The lowest probability from which proposing the label is right often enough."""
    for threshold in GATES:
        picked = probability >= threshold
        proposed = int(picked.sum())
        right = int(y[picked].sum())
        if proposed and (right + 1) / (proposed + 2) >= target:
            return threshold
    return float("inf")


def train(
    examples: Sequence[Example],
    rubric: Rubric,
    *,
    c: float | None = None,
    precision_target: float | None = None,
) -> Model:
    """Fit a model on the examples; raises TrainingError when no label can be learned."""
    started = time.perf_counter()
    c = C if c is None else c
    precision_target = PRECISION_TARGET if precision_target is None else precision_target
    if not examples:
        raise TrainingError("no labelled issues to learn from")
    documents = [features.document(example.issue) for example in examples]
    vectorizers, x = _fit_vectorizers(documents)
    names = np.array(
        [
            f"{block}|{name}"
            for block in BLOCKS
            for name in vectorizers[block].get_feature_names_out()
        ],
        dtype=object,
    )
    truth = [targets(example) for example in examples]
    labels: list[str] = []
    columns: list[np.ndarray[Any, Any]] = []
    intercepts: list[float] = []
    platt: list[tuple[float, float]] = []
    thresholds: list[float] = []
    skipped: dict[str, int] = {}
    label_metrics: dict[str, dict[str, Any]] = {}
    for label in learnable(rubric):
        y = np.array([label in labels_of for labels_of in truth], dtype=np.int8)
        positives = int(y.sum())
        negatives = len(y) - positives
        if min(positives, negatives) < MIN_POSITIVES:
            skipped[label] = positives
            continue
        folds = StratifiedKFold(
            n_splits=min(FOLDS, positives, negatives), shuffle=True, random_state=0
        )
        scores = cross_val_predict(classifier(c), x, y, cv=folds, method="decision_function")
        sigmoid = LogisticRegression(C=1e4).fit(scores.reshape(-1, 1), y)
        a, b = float(sigmoid.coef_[0, 0]), float(sigmoid.intercept_[0])
        final = classifier(c).fit(x, y)
        labels.append(label)
        columns.append(final.coef_[0].astype(np.float32))
        intercepts.append(float(final.intercept_[0]))
        platt.append((a, b))
        probability = 1.0 / (1.0 + np.exp(-(a * scores + b)))
        thresholds.append(gate(probability, y, precision_target))
        predicted = probability >= METRIC_THRESHOLD
        tp = int((predicted & (y == 1)).sum())
        label_metrics[label] = {
            "positives": positives,
            "proposed_from": thresholds[-1] if thresholds[-1] != float("inf") else None,
            "tp": tp,
            "fp": int((predicted & (y == 0)).sum()),
            "fn": int((~predicted & (y == 1)).sum()),
        }
    if not labels:
        raise TrainingError(
            f"no label has {MIN_POSITIVES} issues with it and {MIN_POSITIVES} without it "
            f"among {len(examples)} labelled issues"
        )
    tp = sum(m["tp"] for m in label_metrics.values())
    fp = sum(m["fp"] for m in label_metrics.values())
    fn = sum(m["fn"] for m in label_metrics.values())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    metrics = {
        "examples": len(examples),
        "features": int(x.shape[1]),
        "seconds": round(time.perf_counter() - started, 2),
        # Out of fold, at a probability of 0.5: what the model alone would have got right.
        "micro": {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(2 * precision * recall / (precision + recall), 4)
            if precision + recall
            else 0.0,
        },
        "labels": label_metrics,
        "not_learned": skipped,
    }
    index = {label: i for i, label in enumerate(labels)}
    carries = np.zeros((len(examples), len(labels)), dtype=bool)
    for row, labels_of in enumerate(truth):
        for label in labels_of:
            if label in index:
                carries[row, index[label]] = True
    return Model(
        labels=tuple(labels),
        vectorizers=vectorizers,
        coef=np.column_stack(columns),
        intercept=np.array(intercepts),
        platt_a=np.array([a for a, _ in platt]),
        platt_b=np.array([b for _, b in platt]),
        neighbour_index=prune(x).T.tocsr(),
        numbers=np.array([example.issue.number for example in examples], dtype=np.int64),
        carries=carries,
        feature_names=names,
        thresholds=np.array(thresholds),
        metrics=metrics,
    )
