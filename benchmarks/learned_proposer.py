"""Training and proposing speed of the learned proposer, on one core.

Run: .venv/bin/python benchmarks/learned_proposer.py [--issues 20000] [--propose 2000]

Makes labelled issues of realistic size from the demo issues (each demo issue's text and final
labels, with a traceback of varied frames and a paragraph of words drawn at random, so that no
two issues are alike), trains the pt2 queue's model on them, and proposes `rules+history` for
issues it has not seen, in chunks as a worker does. Prints seconds to train, and issues
proposed per second with evidence (terms with spans, neighbours) and without.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import django

django.setup()

from triage.learning import proposer, training  # noqa: E402
from triage.rubric import engine, loader  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "triage" / "demo" / "issues.jsonl"
# Each issue's frames are mostly in one part of torch, and its final labels name that part.
MODULES = {
    "_inductor/compile_fx": "module: inductor",
    "_inductor/codegen/triton": "module: inductor",
    "_dynamo/symbolic_convert": "module: dynamo",
    "_dynamo/variables/builtin": "module: dynamo",
    "_functorch/aot_autograd": "module: pt2-dispatcher",
    "distributed/fsdp/_fully_shard": "module: fsdp",
    "distributed/tensor/_dispatch": "module: dtensor",
    "fx/experimental/symbolic_shapes": "module: dynamic shapes",
    "_inductor/cudagraph_trees": "module: cuda graphs",
    "nn/attention/flex_attention": "module: flex attention",
}
EXCEPTIONS = [
    "RuntimeError",
    "torch._dynamo.exc.Unsupported",
    "AssertionError",
    "TypeError",
    "torch._inductor.exc.InductorError",
    "ValueError",
    "torch.OutOfMemoryError",
]
WORDS = [
    "tensor",
    "shape",
    "dtype",
    "kernel",
    "graph",
    "break",
    "guard",
    "recompile",
    "stride",
    "layout",
    "cuda",
    "cpu",
    "device",
    "memory",
    "backward",
    "forward",
    "gradient",
    "optimizer",
    "compile",
    "eager",
    "mode",
    "export",
    "trace",
    "symbolic",
    "dynamic",
    "static",
    "batch",
    "sequence",
    "attention",
    "linear",
    "conv",
    "norm",
    "dropout",
    "float16",
    "bfloat16",
    "float32",
    "triton",
    "autotune",
    "benchmark",
    "latency",
    "throughput",
    "regression",
    "accuracy",
    "nan",
    "inf",
    "mismatch",
    "reproducer",
    "script",
    "version",
    "nightly",
    "release",
    "install",
    "wheel",
    "build",
    "error",
    "warning",
    "crash",
    "hang",
]
TARGET_SIZE = 3_000


def issues(count: int, seed: int = 0) -> list[training.Example]:
    rng = random.Random(seed)
    demo = [json.loads(line) for line in DEMO.read_text().splitlines()]
    made = []
    for number in range(1, count + 1):
        raw = demo[number % len(demo)]
        body = raw["body"] or ""
        prose = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 160)))
        trace = ["\n```\nTraceback (most recent call last):\n"]
        main = rng.choice(list(MODULES))
        while len(body) + len(prose) + sum(map(len, trace)) < TARGET_SIZE:
            module = main if rng.random() < 0.6 else rng.choice(list(MODULES))
            trace.append(
                f'  File "/opt/conda/lib/python3.12/site-packages/torch/{module}.py", '
                f"line {rng.randint(10, 3000)}, in f{rng.randint(0, 99)}\n    x = y\n"
            )
        trace.append(f"{rng.choice(EXCEPTIONS)}: something went wrong\n```\n")
        issue = engine.IssueInput(
            number=number,
            title=raw["title"],
            body=f"{body}\n\n{prose}\n{''.join(trace)}",
            labels=("oncall: pt2",),
        )
        labels = {label["name"] for label in raw["labels"]} | {MODULES[main]}
        made.append(training.Example(issue, frozenset(labels)))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--issues", type=int, default=20_000)
    parser.add_argument("--propose", type=int, default=2_000)
    args = parser.parse_args()
    rubric = loader.load("pt2")
    examples = issues(args.issues + args.propose)
    train, held_out = examples[: args.issues], examples[args.issues :]
    size = sum(len(e.issue.title) + len(e.issue.body) for e in train) / len(train)
    print(f"{len(train)} training issues, mean size {size / 1000:.1f} KB")
    started, cpu = time.perf_counter(), time.process_time()
    model = training.train(train, rubric)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"trained in {seconds:.1f} s ({cpu:.1f} s of CPU): {len(model.labels)} labels, "
        f"{model.metrics['features']} features"
    )
    learned = proposer.Learned(model=model, version=1)
    inputs = [example.issue for example in held_out]
    rules = [engine.propose(rubric, issue) for issue in inputs]  # scans cached, as in a worker
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(inputs), 200):
        chunk = inputs[start : start + 200]
        for assessment, draft in zip(
            proposer.assess(learned, chunk), rules[start : start + 200], strict=True
        ):
            proposer.beside_rules(rubric, learned, assessment, draft)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"rules+history with evidence: {len(inputs) / seconds:.0f} issues per second "
        f"({len(inputs) / cpu:.0f} per CPU second)"
    )
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(inputs), 200):
        proposer.assess(learned, inputs[start : start + 200])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"probabilities only: {len(inputs) / seconds:.0f} issues per second "
        f"({len(inputs) / cpu:.0f} per CPU second)"
    )


if __name__ == "__main__":
    main()
