"""A fitted classifier: calibrated probabilities per label, the terms behind them, neighbours.

Prediction is done here with the fitted arrays rather than through scikit-learn's estimators,
one matrix product for every label at once: an estimator call per label costs more than the
arithmetic, and proposing must keep up with a sync of thousands of issues.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from triage.learning import features

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sklearn.feature_extraction.text import TfidfVectorizer

    from triage.rubric.engine import IssueInput

# Bumped whenever features or the arrays' meaning change: an older model is then retrained.
FORMAT = 1
BLOCKS = ("title", "text", "structure")
TERMS_SHOWN = 3
NEIGHBOURS = 5


# One issue's features: their columns and weights (a row of the matrix, without slicing it).
type Row = tuple[np.ndarray[Any, np.dtype[Any]], np.ndarray[Any, np.dtype[np.float32]]]


def rows(x: sp.csr_matrix) -> list[Row]:
    return [
        (x.indices[x.indptr[i] : x.indptr[i + 1]], x.data[x.indptr[i] : x.indptr[i + 1]])
        for i in range(x.shape[0])
    ]


@dataclass(frozen=True, slots=True)
class Term:
    feature: str  # "<block>|<term>"
    weight: float

    @property
    def term(self) -> str:
        return self.feature.partition("|")[2]


@dataclass(frozen=True, slots=True)
class Neighbours:
    numbers: tuple[int, ...]  # the most similar training issues, most similar first
    carrying: tuple[int, ...]  # those of them that carry the label


@dataclass(frozen=True, slots=True)
class Prediction:
    """A label's calibrated probability on one issue."""

    label: str
    probability: float


@dataclass
class Model:
    labels: tuple[str, ...]
    vectorizers: dict[str, TfidfVectorizer]
    # features x labels, and per label: the intercept and Platt's sigmoid (a, b).
    coef: np.ndarray[Any, np.dtype[np.float32]]
    intercept: np.ndarray[Any, np.dtype[np.float64]]
    platt_a: np.ndarray[Any, np.dtype[np.float64]]
    platt_b: np.ndarray[Any, np.dtype[np.float64]]
    # The training issues: their rows normalised and transposed (features x issues) for cosine
    # similarity, their numbers, and which labels each carries (issues x labels).
    neighbour_index: sp.csr_matrix
    numbers: np.ndarray[Any, np.dtype[np.int64]]
    carries: np.ndarray[Any, np.dtype[np.bool_]]
    feature_names: np.ndarray[Any, np.dtype[Any]]
    # Per label, the probability from which the model proposes it on its own: where its
    # out-of-fold precision reached the target (infinity: never, only an opinion).
    thresholds: np.ndarray[Any, np.dtype[np.float64]]
    format: int = FORMAT
    metrics: dict[str, Any] = field(default_factory=dict)

    def matrix(
        self,
        issues: Sequence[IssueInput],
        sources: Sequence[list[tuple[str, str]]] | None = None,
    ) -> sp.csr_matrix:
        if sources is None:
            sources = [features.masked_sources(issue) for issue in issues]
        documents = [
            features.document(issue, masked) for issue, masked in zip(issues, sources, strict=True)
        ]
        return vectorize(self.vectorizers, documents)

    def probabilities(self, x: sp.csr_matrix) -> np.ndarray[Any, np.dtype[np.float64]]:
        """issues x labels."""
        decision = np.asarray(x @ self.coef, dtype=np.float64) + self.intercept
        result: np.ndarray[Any, np.dtype[np.float64]] = 1.0 / (
            1.0 + np.exp(-(self.platt_a * decision + self.platt_b))
        )
        return result

    def terms(self, row: Row, label: int, limit: int = TERMS_SHOWN) -> list[Term]:
        """The features of this issue that pushed hardest towards the label."""
        indices, data = row
        contribution = data * self.coef[indices, label]
        order = np.argsort(-contribution)[:limit]
        return [
            Term(str(self.feature_names[indices[i]]), float(contribution[i]))
            for i in order
            if contribution[i] > 0
        ]

    def neighbours(self, x: sp.csr_matrix, limit: int = NEIGHBOURS) -> list[list[int]]:
        """For each issue, the rows of the most similar training issues, most similar first."""
        if not self.numbers.size:
            return [[] for _ in range(x.shape[0])]
        # Cosine similarity, up to the query's own norm, which does not change the order.
        similarity = (prune(x) @ self.neighbour_index).tocsr()
        found = []
        for i in range(similarity.shape[0]):
            start, end = similarity.indptr[i], similarity.indptr[i + 1]
            scores, rows = similarity.data[start:end], similarity.indices[start:end]
            if scores.size > limit:
                top = np.argpartition(-scores, limit)[:limit]
            else:
                top = np.arange(scores.size)
            top = top[np.argsort(-scores[top], kind="stable")]
            found.append([int(rows[j]) for j in top if scores[j] > 0])
        return found

    def neighbours_for(self, rows: list[int], label: int) -> Neighbours:
        return Neighbours(
            numbers=tuple(int(self.numbers[i]) for i in rows),
            carrying=tuple(int(self.numbers[i]) for i in rows if self.carries[i, label]),
        )


# Neighbours are found on each issue's most telling features only: the common terms of every
# issue would make each lookup touch most of the training issues.
NEIGHBOUR_FEATURES = 24


def prune(x: sp.csr_matrix, keep: int = NEIGHBOUR_FEATURES) -> sp.csr_matrix:
    """Each row's `keep` heaviest features, the row normalised again."""
    x = sp.csr_matrix(x, dtype=np.float32, copy=True)
    for i in range(x.shape[0]):
        start, end = x.indptr[i], x.indptr[i + 1]
        if end - start > keep:
            row = x.data[start:end]
            row[np.argpartition(-row, keep)[keep:]] = 0
    x.eliminate_zeros()
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1
    pruned: sp.csr_matrix = sp.csr_matrix(sp.diags(1 / norms) @ x)
    return pruned


def vectorize(
    vectorizers: dict[str, TfidfVectorizer], documents: Sequence[features.Document]
) -> sp.csr_matrix:
    blocks = [
        vectorizers[block].transform([getattr(document, block) for document in documents])
        for block in BLOCKS
    ]
    return sp.hstack(blocks, format="csr", dtype=np.float32)
