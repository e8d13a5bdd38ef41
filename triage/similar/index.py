"""A TF-IDF index of a repository's issues (scikit-learn), and the nearest issues to others.

Where the index lives: a file per repository under TRIAGE_SIMILAR_DIR, loaded once per worker
process and kept in memory until the file changes. Not in the database: at 100,000 issues the
matrix is some 100 MB, which every lookup would have to read back (and PostgreSQL's and
SQLite's blobs are no place for it), while a file is read once per process. The database stays
the truth: a worker that finds no file (another machine, a wiped volume) rebuilds it from the
issues' rows, so losing the directory costs a rebuild, never data. Only workers read it; the
issue page reads the stored results (`SimilarIssue`).

A lookup is exact cosine similarity, found in two steps so that it stays fast at 100,000
issues: the query's heaviest terms gather candidates from the inverted matrix (the issues that
share its rarest words and frames), then the candidates are scored with the whole query.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import joblib
import numpy as np
from django.conf import settings
from django.utils import timezone
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize

from triage.similar import text

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime
    from pathlib import Path

# The query's terms that gather candidates: the heaviest carry the similarity.
QUERY_TERMS = 40
# Candidates scored exactly per query.
CANDIDATES = 60
# The frames block weighs this much beside the words (both are unit vectors before): a shared
# traceback says more than shared words, but an issue without one must still find its like.
FRAMES_WEIGHT = 0.8
# Why two issues are similar: this many shared words and frames, the heaviest.
SHARED_TERMS = 6
SHARED_FRAMES = 4
# Words: identifiers and words of two characters or more; dotted names split into their parts.
TOKEN_PATTERN = r"(?u)\b[A-Za-z_][A-Za-z0-9_]+\b"


@dataclass(frozen=True)
class Document:
    issue_id: int
    title: str
    body: str


@dataclass(frozen=True)
class Match:
    issue_id: int
    score: float
    shared_terms: list[str]
    shared_frames: list[str]


def _given(tokens: list[str]) -> list[str]:
    # The frames vectorizer's analyzer: the frames are already tokens. Module-level, so that
    # the index can be pickled.
    return tokens


@dataclass
class Index:
    words: TfidfVectorizer | None
    frames: TfidfVectorizer | None
    # Feature names, the words' first, then the frames'.
    names: np.ndarray[Any, Any]
    word_count: int
    # One unit row per issue; `ids` holds each row's issue id.
    matrix: sparse.csr_matrix
    ids: np.ndarray[Any, Any]
    built_at: datetime = field(default_factory=timezone.now)
    inverted: sparse.csr_matrix = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.inverted = self.matrix.T.tocsr()

    @classmethod
    def build(cls, documents: Iterable[Document]) -> Index:
        ids: list[int] = []
        word_texts: list[str] = []
        frame_lists: list[list[str]] = []
        for document in documents:
            ids.append(document.issue_id)
            word_texts.append(text.words(document.title, document.body))
            frame_lists.append(text.frames(document.body))
        count = len(ids)
        # Small repositories keep every word; large ones drop words in half the issues or
        # more (they tell nothing apart) and words seen once (typos, hashes).
        words: TfidfVectorizer | None = TfidfVectorizer(
            token_pattern=TOKEN_PATTERN,
            stop_words="english",
            sublinear_tf=True,
            min_df=2 if count >= 1000 else 1,
            max_df=0.5 if count >= 100 else 1.0,
            max_features=300_000,
            dtype=np.float32,
        )
        frames: TfidfVectorizer | None = TfidfVectorizer(
            analyzer=_given, sublinear_tf=True, lowercase=False, dtype=np.float32
        )
        blocks = []
        names: list[str] = []
        try:
            assert words is not None
            blocks.append(words.fit_transform(word_texts))
            names += list(words.get_feature_names_out())
        except ValueError:
            # No words at all (an empty repository): nothing to compare.
            words = None
            blocks.append(sparse.csr_matrix((count, 0), dtype=np.float32))
        word_count = len(names)
        try:
            assert frames is not None
            blocks.append(frames.fit_transform(frame_lists) * FRAMES_WEIGHT)
            names += list(frames.get_feature_names_out())
        except ValueError:
            frames = None
        matrix = _unit_rows(blocks, count)
        return cls(
            words=words,
            frames=frames,
            names=np.array(names, dtype=object),
            word_count=word_count,
            matrix=matrix,
            ids=np.array(ids, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def vectors(self, documents: Sequence[Document]) -> sparse.csr_matrix:
        """The documents' rows in this index's space (words it has not seen are ignored)."""
        blocks = [
            self.words.transform([text.words(d.title, d.body) for d in documents])
            if self.words is not None
            else sparse.csr_matrix((len(documents), 0), dtype=np.float32)
        ]
        if self.frames is not None:
            blocks.append(
                self.frames.transform([text.frames(d.body) for d in documents]) * FRAMES_WEIGHT
            )
        return _unit_rows(blocks, len(documents))

    def upsert(self, documents: Sequence[Document]) -> sparse.csr_matrix:
        """Put these issues' rows in the index (replacing older ones), as the vocabulary of the
        last build sees them; returns the rows."""
        rows = self.vectors(documents)
        new_ids = np.array([d.issue_id for d in documents], dtype=np.int64)
        keep = ~np.isin(self.ids, new_ids)
        self.matrix = sparse.vstack([self.matrix[keep], rows], format="csr")
        self.ids = np.concatenate([self.ids[keep], new_ids])
        self.inverted = self.matrix.T.tocsr()
        return rows

    def nearest(
        self, queries: sparse.csr_matrix, query_ids: Sequence[int], k: int
    ) -> list[list[Match]]:
        """The k issues nearest each query row (its own issue left out), nearest first."""
        if not self.matrix.shape[1] or not len(self.ids):
            return [[] for _ in query_ids]
        queries = queries.tocsr()
        coarse = (_heaviest(queries, QUERY_TERMS) @ self.inverted).tocsr()
        found = []
        for row, issue_id in enumerate(query_ids):
            start, end = coarse.indptr[row], coarse.indptr[row + 1]
            candidates = coarse.indices[start:end]
            if len(candidates) > CANDIDATES:
                best = np.argpartition(-coarse.data[start:end], CANDIDATES)[:CANDIDATES]
                candidates = candidates[best]
            query = queries[row]
            exact = (self.matrix[candidates] @ query.T).toarray().ravel()
            matches: list[Match] = []
            for position in np.argsort(-exact, kind="stable"):
                candidate = int(candidates[position])
                score = float(exact[position])
                if score <= 0 or int(self.ids[candidate]) == issue_id:
                    continue
                terms, frames = self._shared(query, candidate)
                matches.append(Match(int(self.ids[candidate]), min(score, 1.0), terms, frames))
                if len(matches) == k:
                    break
            found.append(matches)
        return found

    def _shared(self, query: sparse.csr_matrix, row: int) -> tuple[list[str], list[str]]:
        start, end = self.matrix.indptr[row], self.matrix.indptr[row + 1]
        common, in_query, in_row = np.intersect1d(
            query.indices, self.matrix.indices[start:end], return_indices=True
        )
        weight = query.data[in_query] * self.matrix.data[start:end][in_row]
        ordered = common[np.argsort(-weight, kind="stable")]
        terms = [str(self.names[c]) for c in ordered if c < self.word_count][:SHARED_TERMS]
        frames = [str(self.names[c]) for c in ordered if c >= self.word_count][:SHARED_FRAMES]
        return terms, frames


def _unit_rows(blocks: list[Any], count: int) -> sparse.csr_matrix:
    matrix = sparse.hstack(blocks, format="csr", dtype=np.float32) if blocks else None
    if matrix is None or matrix.shape[1] == 0:
        return sparse.csr_matrix((count, 0), dtype=np.float32)
    unit: sparse.csr_matrix = normalize(matrix, norm="l2", copy=False)
    unit.sort_indices()
    return unit


def _heaviest(matrix: sparse.csr_matrix, keep: int) -> sparse.csr_matrix:
    """Each row with only its `keep` heaviest entries."""
    counts = np.diff(matrix.indptr)
    if counts.max(initial=0) <= keep:
        return matrix
    indptr = [0]
    indices: list[Any] = []
    data: list[Any] = []
    for row in range(matrix.shape[0]):
        start, end = matrix.indptr[row], matrix.indptr[row + 1]
        values = matrix.data[start:end]
        chosen = np.argpartition(-values, keep)[:keep] if end - start > keep else slice(None)
        indices.append(matrix.indices[start:end][chosen])
        data.append(values[chosen])
        indptr.append(indptr[-1] + len(data[-1]))
    return sparse.csr_matrix(
        (np.concatenate(data), np.concatenate(indices), np.array(indptr)), shape=matrix.shape
    )


def path_for(repository: str) -> Path:
    # The repository's name comes from a queue row: only safe characters reach the file name.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", repository.replace("/", "__"))
    directory: Path = settings.TRIAGE_SIMILAR_DIR
    return directory / f"{safe}.joblib"


# Indexes this process has read: path -> (the file's modification time, the index).
_loaded: dict[str, tuple[int, Index]] = {}


def load(repository: str) -> Index | None:
    """The repository's index as its file has it, or None when there is none yet."""
    path = path_for(repository)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        _loaded.pop(str(path), None)
        return None
    cached = _loaded.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    # A file this app wrote into a directory only it writes to: unpickling it is safe.
    index = joblib.load(path)
    if not isinstance(index, Index):
        return None
    _loaded[str(path)] = (stamp, index)
    return index


def save(repository: str, index: Index) -> None:
    """Write the index whole, then rename it into place: a reader never sees half a file."""
    path = path_for(repository)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(handle)
    try:
        joblib.dump(index, temporary)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    _loaded[str(path)] = (path.stat().st_mtime_ns, index)
