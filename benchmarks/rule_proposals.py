"""Rule proposals per second on one core, over issues of realistic size (about 5 KB each).

Run: .venv/bin/python benchmarks/rule_proposals.py [--seconds 5]

Takes the demo issues and grows each body with a realistic traceback to about 5 KB, then runs
the pt2, distributed and triage rubrics over them in a loop in this one process. Every pass
starts with an empty scan cache, so each issue's text is scanned once per pass and its signals
shared by the three rubrics, as when a worker proposes an issue in each queue it is in. The
figure with one rubric per scan (no sharing at all) is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from triage.rubric import engine, loader, signals

DEMO = Path(__file__).resolve().parent.parent / "triage" / "demo" / "issues.jsonl"
TARGET_SIZE = 5_000
FRAME = (
    '  File "/opt/conda/lib/python3.12/site-packages/torch/_inductor/{module}.py", '
    "line {line}, in {function}\n    {code}\n"
)
FRAMES = [
    ("compile_fx", "fw_compiler_base", "return inner_compile(model, example_inputs)"),
    ("graph", "codegen", "self.scheduler = Scheduler(self.operations)"),
    ("scheduler", "fuse_nodes", "nodes = self.fuse_nodes_once(nodes)"),
    ("codegen/triton", "codegen_kernel", "code.splice(self.codegen_body())"),
    ("lowering", "wrapped", "out = decomp_fn(*args, **kwargs)"),
]


def realistic_issues() -> list[engine.IssueInput]:
    issues = []
    for line in DEMO.read_text().splitlines():
        raw = json.loads(line)
        body = raw["body"] or ""
        trace = ["\n```\nTraceback (most recent call last):\n"]
        index = 0
        while len(body) + sum(map(len, trace)) < TARGET_SIZE:
            module, function, code = FRAMES[index % len(FRAMES)]
            trace.append(
                FRAME.format(module=module, line=100 + 37 * index, function=function, code=code)
            )
            index += 1
        body += "".join(trace) + "```\n"
        issues.append(
            engine.IssueInput(
                number=raw["number"],
                title=raw["title"],
                body=body,
                labels=tuple(label["name"] for label in raw["labels"]),
                comments=tuple((c["id"], c["body"]) for c in raw.get("comments") or []),
            )
        )
    return issues


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    issues = realistic_issues()
    rubrics = [loader.load(name) for name in ("pt2", "distributed", "triage")]
    size = sum(len(i.title) + len(i.body) + sum(len(c) for _, c in i.comments) for i in issues)
    print(
        f"{len(issues)} issues, mean size {size / len(issues) / 1000:.1f} KB, rubrics: pt2, distributed, triage"
    )
    for rubric in rubrics:
        engine.propose(rubric, issues[0])  # compile the patterns outside the timing
    unshared = run(rubrics, issues, args.seconds / 2, share=False)
    print(f"one scan per proposal: {unshared:.0f} proposals per second")
    shared = run(rubrics, issues, args.seconds, share=True)
    print(f"{shared:.0f} proposals per second")


def run(
    rubrics: list[loader.Rubric], issues: list[engine.IssueInput], seconds: float, *, share: bool
) -> float:
    done = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    while time.perf_counter() - started < seconds:
        for issue in issues:
            for rubric in rubrics:
                if not share:
                    signals._scanned.clear()
                engine.propose(rubric, issue)
        done += len(rubrics) * len(issues)
        signals._scanned.clear()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    print(f"{done} proposals in {wall:.2f} s wall, {cpu:.2f} s CPU")
    return done / wall


if __name__ == "__main__":
    main()
