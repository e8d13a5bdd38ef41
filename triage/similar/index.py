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
import functools
import math
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
    from collections.abc import Callable, Iterable, Sequence
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
        # Every word the vectorizer pruned, kept for introspection only: it would be most of
        # the file (scikit-learn's documentation says it may be deleted).
        for vectorizer in (words, frames):
            if vectorizer is not None and hasattr(vectorizer, "stop_words_"):
                del vectorizer.stop_words_
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
        """The documents' rows in this index's space (words it has not seen are ignored).

        What the vectorizers' own `transform` computes (sublinear counts times the idf, each
        block a unit vector, then the frames' weight and one norm for the row), done here:
        scikit-learn's checks on every call cost more than the arithmetic for a few issues,
        and a lookup is one issue.
        """
        indptr = [0]
        indices: list[int] = []
        data: list[float] = []
        for document in documents:
            columns: dict[int, float] = {}
            if self.words is not None:
                tokens = self._word_analyzer(text.words(document.title, document.body))
                columns |= _weights(tokens, self.words.vocabulary_, self.words.idf_, 0, 1.0)
            if self.frames is not None:
                columns |= _weights(
                    text.frames(document.body),
                    self.frames.vocabulary_,
                    self.frames.idf_,
                    self.word_count,
                    FRAMES_WEIGHT,
                )
            norm = math.sqrt(sum(value * value for value in columns.values())) or 1.0
            for column in sorted(columns):
                indices.append(column)
                data.append(columns[column] / norm)
            indptr.append(len(indices))
        return sparse.csr_matrix(
            (
                np.array(data, dtype=np.float32),
                np.array(indices, dtype=np.int32),
                np.array(indptr, dtype=np.int64),
            ),
            shape=(len(documents), self.matrix.shape[1]),
        )

    @functools.cached_property
    def _word_analyzer(self) -> Callable[[str], list[str]]:
        assert self.words is not None
        analyzer: Callable[[str], list[str]] = self.words.build_analyzer()
        return analyzer

    def __getstate__(self) -> dict[str, Any]:
        # The analyzer is rebuilt from the vectorizer after loading (it does not pickle), the
        # inverted matrix from the matrix (it would double the file).
        state = dict(self.__dict__)
        state.pop("_word_analyzer", None)
        state.pop("inverted", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.inverted = self.matrix.T.tocsr()

    def upserted(self, documents: Sequence[Document]) -> tuple[Index, sparse.csr_matrix]:
        """A copy of the index with these issues' rows in it (replacing older ones), as the
        vocabulary of the last build sees them, and the rows. A copy, not a change: another
        thread may be reading this index."""
        rows = self.vectors(documents)
        new_ids = np.array([d.issue_id for d in documents], dtype=np.int64)
        keep = ~np.isin(self.ids, new_ids)
        index = Index(
            words=self.words,
            frames=self.frames,
            names=self.names,
            word_count=self.word_count,
            matrix=sparse.vstack([self.matrix[keep], rows], format="csr"),
            ids=np.concatenate([self.ids[keep], new_ids]),
            built_at=self.built_at,
        )
        return index, rows

    def nearest(
        self, queries: sparse.csr_matrix, query_ids: Sequence[int], k: int
    ) -> list[list[Match]]:
        """The k issues nearest each query row (its own issue left out), nearest first."""
        if not self.matrix.shape[1] or not len(self.ids):
            return [[] for _ in query_ids]
        queries = queries.tocsr()
        inverted, matrix = self.inverted, self.matrix
        found = []
        for row, issue_id in enumerate(query_ids):
            start, end = queries.indptr[row], queries.indptr[row + 1]
            terms, weights = queries.indices[start:end], queries.data[start:end]
            # Candidates: the issues that share the query's heaviest terms, scored on them.
            heaviest = np.argsort(-weights, kind="stable")[:QUERY_TERMS]
            coarse = np.zeros(len(self.ids), dtype=np.float32)
            for position in heaviest:
                term = terms[position]
                low, high = inverted.indptr[term], inverted.indptr[term + 1]
                coarse[inverted.indices[low:high]] += weights[position] * inverted.data[low:high]
            touched = np.flatnonzero(coarse)
            if len(touched) > CANDIDATES:
                touched = touched[np.argpartition(-coarse[touched], CANDIDATES)[:CANDIDATES]]
            # Then each candidate scored on the whole query: the exact cosine.
            dense = np.zeros(matrix.shape[1], dtype=np.float32)
            dense[terms] = weights
            exact = np.array(
                [
                    float(
                        np.dot(
                            matrix.data[matrix.indptr[c] : matrix.indptr[c + 1]],
                            dense[matrix.indices[matrix.indptr[c] : matrix.indptr[c + 1]]],
                        )
                    )
                    for c in touched
                ]
            )
            matches: list[Match] = []
            query = queries[row]
            for position in np.argsort(-exact, kind="stable"):
                candidate = int(touched[position])
                score = float(exact[position])
                if score <= 0 or int(self.ids[candidate]) == issue_id:
                    continue
                shared_terms, shared_frames = self._shared(query, candidate)
                matches.append(
                    Match(int(self.ids[candidate]), min(score, 1.0), shared_terms, shared_frames)
                )
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


def _weights(
    tokens: list[str], vocabulary: dict[str, int], idf: Any, offset: int, scale: float
) -> dict[int, float]:
    """One block of a row: 1 + log(count) times the idf, as a unit vector times `scale`."""
    counts: dict[int, int] = {}
    for token in tokens:
        column = vocabulary.get(token)
        if column is not None:
            counts[column] = counts.get(column, 0) + 1
    weights = {column: (1.0 + math.log(n)) * float(idf[column]) for column, n in counts.items()}
    norm = math.sqrt(sum(value * value for value in weights.values())) or 1.0
    return {offset + column: value / norm * scale for column, value in weights.items()}


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
