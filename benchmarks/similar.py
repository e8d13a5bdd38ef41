"""Similar-issue lookup at scale: index build time, and lookup time per issue (p50, p95).

Run: .venv/bin/python benchmarks/similar.py --issues 100000 [--lookups 1000] [--duplicates]

Synthetic issues, generated here (no real issue text): 60 "modules", each with its own words
and its own traceback frames; each issue draws its words from a Zipf-shaped vocabulary of
40,000, a third of them from its module, and two issues in three carry a traceback of 4 to 14
of its module's frames. A lookup is what a worker does for one issue: its vector (words and
frames) and its 5 nearest issues with the words and frames they share.

--duplicates re-files 500 issues (the same traceback, the title and body reworded: a third of
the words dropped, a fifth replaced) and prints where the re-filings score against their
original, and where the nearest unrelated issue scores: the figures behind
TRIAGE_DUPLICATE_SCORE. Synthetic issues of one module share long runs of frames, more than
real ones do; `--corpus triage/devset/issues.jsonl --duplicates` measures the same on written
issues (the made-up development set: real-looking prose and tracebacks, no real issue text).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import joblib
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from triage.similar.index import Document, Index

VOCABULARY = 40_000
MODULES = 60
MODULE_WORDS = 300
MODULE_FRAMES = 80
SYLLABLES = ["ka", "to", "ri", "mu", "sel", "dan", "pho", "vi", "gre", "lu", "ne", "bo", "za"]


def _words(rng: np.random.Generator, count: int) -> list[str]:
    words: set[str] = set()
    while len(words) < count:
        parts = rng.choice(SYLLABLES, size=int(rng.integers(2, 6)))
        words.add("".join(parts))
    return sorted(words)


def generate(count: int, seed: int = 7) -> tuple[list[Document], dict[str, object]]:
    rng = np.random.default_rng(seed)
    if not count:
        return [], {"rng": rng}
    vocabulary = np.array(_words(rng, VOCABULARY))
    zipf = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.05
    # Drawn by inverting the cumulative distribution: rng.choice(p=...) sums it on every call.
    cumulative = np.cumsum(zipf / zipf.sum())
    module_words = [rng.choice(vocabulary, MODULE_WORDS, replace=False) for _ in range(MODULES)]
    module_frames = [
        [
            f'  File "/opt/conda/lib/python3.12/site-packages/torch/m{m}/{w1}.py", '
            f"line {int(rng.integers(1, 3000))}, in {w2}"
            for w1, w2 in zip(
                rng.choice(vocabulary, MODULE_FRAMES),
                rng.choice(vocabulary, MODULE_FRAMES),
                strict=True,
            )
        ]
        for m in range(MODULES)
    ]
    exceptions = ["RuntimeError", "TypeError", "torch._dynamo.exc.Unsupported", "AssertionError"]
    documents = []
    for issue_id in range(1, count + 1):
        module = int(rng.integers(MODULES))
        length = int(rng.integers(40, 400))
        drawn = np.searchsorted(cumulative, rng.random(length * 2 // 3))
        general = vocabulary[np.minimum(drawn, VOCABULARY - 1)]
        topical = rng.choice(module_words[module], size=length // 3)
        body_words = np.concatenate([general, topical])
        rng.shuffle(body_words)
        title = " ".join(
            np.concatenate([rng.choice(module_words[module], 3), general[:5]]).tolist()
        )
        body = " ".join(body_words.tolist())
        if rng.random() < 2 / 3:
            depth = int(rng.integers(4, 15))
            start = int(rng.integers(0, MODULE_FRAMES - depth))
            trace = "\n".join(module_frames[module][start : start + depth])
            error = exceptions[int(rng.integers(len(exceptions)))]
            body += f"\n\n```\nTraceback (most recent call last):\n{trace}\n{error}: failed\n```\n"
        documents.append(Document(issue_id, title, body))
    return documents, {"rng": rng, "vocabulary": vocabulary}


def reworded(
    document: Document, issue_id: int, rng: np.random.Generator, words: object
) -> Document:
    vocabulary = np.asarray(words)

    def reword(text: str) -> str:
        out = []
        for word in text.split(" "):
            roll = rng.random()
            if roll < 1 / 3:
                continue
            out.append(str(vocabulary[rng.integers(len(vocabulary))]) if roll < 0.53 else word)
        return " ".join(out)

    prose, _, trace = document.body.partition("\n\n```")
    body = reword(prose) + ("\n\n```" + trace if trace else "")
    return Document(issue_id, reword(document.title), body)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=1000)
    parser.add_argument("--duplicates", action="store_true")
    parser.add_argument("--corpus", type=Path, help="issues from this JSON Lines file instead")
    options = parser.parse_args()

    started = time.perf_counter()
    documents, extra = generate(0 if options.corpus else options.issues)
    if not options.corpus:
        print(
            f"generated {len(documents):,} synthetic issues in {time.perf_counter() - started:.1f} s"
        )
    else:
        rows = [json.loads(line) for line in options.corpus.read_text().splitlines() if line]
        documents = [
            Document(n, str(row["title"]), str(row.get("body") or ""))
            for n, row in enumerate(rows, start=1)
        ]
        words = sorted({w for d in documents for w in d.body.split() if w.isalpha()})
        extra["vocabulary"] = np.array(words)
        options.issues = len(documents)
        print(f"read {len(documents):,} issues from {options.corpus}")

    started, started_cpu = time.perf_counter(), time.process_time()
    index = Index.build(documents)
    built = time.perf_counter() - started
    print(
        f"index build: {built:.1f} s, {time.process_time() - started_cpu:.1f} s of CPU "
        f"({index.matrix.shape[1]:,} features, {index.matrix.nnz:,} non-zeros)"
    )

    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        path = Path(directory) / "index.joblib"
        joblib.dump(index, path)
        saved = time.perf_counter() - started
        started = time.perf_counter()
        joblib.load(path)
        print(
            f"index file: {path.stat().st_size / 1e6:.0f} MB, saved in {saved:.1f} s, "
            f"loaded in {time.perf_counter() - started:.1f} s"
        )

    rng = np.random.default_rng(11)
    sample = rng.choice(len(documents), size=min(options.lookups, len(documents)), replace=False)
    timings = []
    cpu = []
    for position in sample:
        document = documents[int(position)]
        started, started_cpu = time.perf_counter(), time.process_time()
        vector = index.vectors([document])
        index.nearest(vector, [document.issue_id], 5)
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    print(
        f"lookup per issue over {len(timings)} issues: p50 {statistics.median(timings):.1f} ms, "
        f"p95 {percentile(timings, 0.95):.1f} ms, max {max(timings):.1f} ms (target < 20 ms)"
    )
    # On a shared machine the wall clock counts the others' work too; the CPU time does not.
    print(
        f"  CPU time per lookup: p50 {statistics.median(cpu):.1f} ms, "
        f"p95 {percentile(cpu, 0.95):.1f} ms"
    )

    if options.duplicates:
        refiled_scores = []
        unrelated_scores = []
        generator = extra["rng"]
        assert isinstance(generator, np.random.Generator)
        for offset, position in enumerate(sample[:500]):
            original = documents[int(position)]
            copy = reworded(original, options.issues + 1 + offset, generator, extra["vocabulary"])
            matches = index.nearest(index.vectors([copy]), [copy.issue_id], 5)[0]
            to_original = [m.score for m in matches if m.issue_id == original.issue_id]
            refiled_scores.append(to_original[0] if to_original else 0.0)
            others = [m.score for m in matches if m.issue_id != original.issue_id]
            unrelated_scores.append(others[0] if others else 0.0)
        print(
            "re-filed issue vs its original: "
            f"min {min(refiled_scores):.2f}, p5 {percentile(refiled_scores, 0.05):.2f}, "
            f"median {statistics.median(refiled_scores):.2f}"
        )
        print(
            "nearest unrelated issue: "
            f"median {statistics.median(unrelated_scores):.2f}, "
            f"p99 {percentile(unrelated_scores, 0.99):.2f}, max {max(unrelated_scores):.2f}"
        )
        for threshold in (0.5, 0.55, 0.6, 0.65, 0.7, 0.8):
            kept = sum(score >= threshold for score in refiled_scores) / len(refiled_scores)
            wrong = sum(score >= threshold for score in unrelated_scores) / len(unrelated_scores)
            print(
                f"  from {threshold:.2f}: {kept:.0%} of re-filings marked, "
                f"{wrong:.1%} of issues marked against an unrelated one"
            )


if __name__ == "__main__":
    main()
