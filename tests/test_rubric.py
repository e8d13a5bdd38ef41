from __future__ import annotations

import shutil

import pytest

from triage.rubric import loader
from triage.rubric.engine import Draft, IssueInput, guard, propose
from triage.rubric.signals import TextSource, extract

RULE = """
[[rule]]
id = "extra"
when = ["graph_break"]
add = ["module: dynamo"]
sections = ["component-isolation"]
"""


@pytest.fixture
def rubric_copy(tmp_path):
    target = tmp_path / "pt2"
    shutil.copytree(loader.RUBRICS_DIR / "pt2", target)
    return target


@pytest.mark.parametrize("name", ["pt2", "distributed", "triage"])
def test_shipped_rubrics_load(name):
    rubric = loader.load(name)
    assert rubric.rules
    assert len(rubric.version) == 16


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'add = ["module: dynamo"]',
            'add = ["module: dynamoo"]',
            "unknown label 'module: dynamoo'",
        ),
        ('sections = ["component-isolation"]', 'sections = ["nope"]', "unknown section 'nope'"),
        ('when = ["graph_break"]', 'when = ["graph_brake"]', "unknown signal 'graph_brake'"),
        (
            'sections = ["component-isolation"]',
            'sections = ["component-isolation"]\ntemplate = "x"',
            "unknown template 'x'",
        ),
        (
            'add = ["module: dynamo"]',
            'add = ["module: docs"]',
            "'module: docs' is not in the vocabulary",
        ),
        ('id = "extra"', 'id = "pt2-fuzzer"', "rule id 'pt2-fuzzer' is used twice"),
    ],
)
def test_a_broken_rule_is_refused_with_file_and_line(rubric_copy, old, new, message):
    rules = rubric_copy / "rules.toml"
    text = rules.read_text()
    rules.write_text(text + RULE.replace(old, new))
    with pytest.raises(loader.RubricError) as failure:
        loader.load_from(rubric_copy)
    assert failure.value.path == rules
    assert message in failure.value.message
    assert failure.value.line > text.count("\n")


def test_a_syntax_error_is_refused_with_its_line(rubric_copy):
    rules = rubric_copy / "rules.toml"
    rules.write_text("[tiers]\nhigh = 0.8\n[[rule]\n")
    with pytest.raises(loader.RubricError) as failure:
        loader.load_from(rubric_copy)
    assert failure.value.line == 3


def test_an_unknown_vocabulary_label_is_refused(rubric_copy):
    vocab = rubric_copy / "vocabulary.toml"
    vocab.write_text(vocab.read_text().replace('"actionable",', '"actionable", "made up",'))
    with pytest.raises(loader.RubricError, match="unknown label 'made up'"):
        loader.load_from(rubric_copy)


def test_a_heading_without_id_is_refused(rubric_copy):
    prose = rubric_copy / "rubric.md"
    prose.write_text(prose.read_text() + "\n## A section without id\n")
    with pytest.raises(loader.RubricError, match="stable id"):
        loader.load_from(rubric_copy)


def test_the_version_changes_with_any_file(rubric_copy):
    before = loader.load_from(rubric_copy).version
    templates = rubric_copy / "templates.toml"
    templates.write_text(templates.read_text() + "\n")
    assert loader.load_from(rubric_copy).version != before


def issue(body, title="t", labels=("oncall: pt2",), comments=()):
    return IssueInput(1, title, body, tuple(labels), tuple(comments))


def test_evidence_quotes_the_exact_span():
    body = "Log:\ntorch._dynamo.exc.Unsupported: call_method\n"
    draft = propose(loader.load("pt2"), issue(body))
    citation = next(c for c in draft.citations if c.rule == "pt2-graph-break")
    assert body[citation.start : citation.end] == citation.evidence
    assert citation.source == "body"


def test_cc_lines_are_not_evidence():
    draft = propose(loader.load("pt2"), issue("repro below", comments=((9, "cc @fsdp-team FSDP"),)))
    assert "pt2-fsdp-visibility" not in draft.rules_fired


def test_negated_statements_do_not_fire():
    draft = propose(loader.load("pt2"), issue("This is not a regression, it never worked."))
    assert "pt2-regression-escalation" not in draft.rules_fired


def test_dynamic_false_means_dynamic_shapes_only():
    body = "torch._dynamo.exc.Unsupported somewhere.\nWith dynamic=False it works fine."
    draft = propose(loader.load("pt2"), issue(body))
    assert "module: dynamic shapes" in draft.add
    assert "module: dynamo" not in draft.add


def test_cpu_only_inductor_is_redirected():
    body = "aot_eager: passes\ninductor: fails\nOnly on CPU, CUDA is fine."
    draft = propose(loader.load("pt2"), issue(body, title="[Inductor][CPU] wrong values"))
    assert "oncall: cpu inductor" in draft.add
    # The CPU inductor oncall is a part of PT2: the issue keeps `oncall: pt2`.
    assert draft.remove == ()


def test_no_rule_is_an_honest_low():
    draft = propose(loader.load("pt2"), issue("```python\nimport torch\nprint(1)\n```"))
    assert draft.rules_fired == ()
    assert draft.tier == "low"
    assert "No rule" in draft.rationale


def draft(**changes):
    base = Draft(
        proposer="llm",
        proposer_version="0",
        rubric_version="v",
        add=(),
        remove=(),
        template="",
        comment="",
        close=False,
        score=0.9,
        tier="high",
        rationale="",
        citations=(),
    )
    from dataclasses import replace

    return replace(base, **changes)


def test_guard_drops_what_policy_forbids_and_says_why():
    rubric = loader.load("distributed")
    guarded = guard(
        rubric,
        draft(
            add=("high priority", "module: docs", "module: fsdp", "oncall: distributed infra"),
            remove=("oncall: distributed", "module: docs", "bot-triaged"),
            template="evil",
            comment="see http://evil.example",
        ),
        ["oncall: distributed", "module: fsdp", "oncall: distributed parallelisms", "bot-triaged"],
    )
    assert guarded.add == ()
    assert guarded.remove == ()
    assert guarded.template == "" and guarded.comment == ""
    reasons = {(d.label, d.action): d.reason for d in guarded.dropped}
    assert reasons[("high priority", "add")].startswith("forbidden")
    assert reasons[("module: docs", "add")] == "not in the queue's vocabulary"
    assert reasons[("module: fsdp", "add")] == "already on the issue"
    assert "at most one of its group" in reasons[("oncall: distributed infra", "add")]
    assert reasons[("oncall: distributed", "remove")] == "protected: never removed"
    assert reasons[("module: docs", "remove")] == "not on the issue"
    assert reasons[("evil", "template")] == "not a template of this rubric"


def test_guard_keeps_one_label_of_an_exclusive_group():
    rubric = loader.load("distributed")
    guarded = guard(
        rubric,
        draft(add=("oncall: distributed infra", "oncall: distributed checkpointing")),
        ["oncall: distributed"],
    )
    assert guarded.add == ("oncall: distributed infra",)


def signals_of(text):
    from triage.rubric.signals import TextSource, extract

    return set(extract([TextSource("body", text)]))


@pytest.mark.parametrize(
    ("text", "present", "absent"),
    [
        # Markdown backticks around the backend name.
        (
            'With `backend="eager"` it works, `backend="aot_eager"` fails',
            {"ablation_eager_works", "ablation_aot_eager_fails"},
            set(),
        ),
        # "Eager" the mode is not the eager backend.
        ("Eager is fine, aot_eager fails", {"ablation_aot_eager_fails"}, {"ablation_eager_works"}),
        # InductorError is how BackendCompilerFailed reads since 2.8.
        (
            "torch._inductor.exc.InductorError: LoweringException",
            {"backend_compiler_failed"},
            set(),
        ),
        # Falling back to eager silently is a graph break, not a wrong result.
        ("without fullgraph it silently falls back to eager", set(), {"silent_wrong"}),
        ("it silently returns wrong values", {"silent_wrong"}, set()),
        # A recompile log's "guard failure" is not a dynamic-shapes signal.
        ("triggered by the following guard failure(s): ___check_obj_id", set(), {"guard_failure"}),
        # Negations a sentence away.
        ("I don't think this is a regression", set(), {"regression"}),
        ("We do not use FSDP here", set(), {"fsdp", "distributed_any"}),
        ("This used to work in 2.9", {"regression"}, set()),
        # A libtorch reproducer is a reproducer.
        (
            "```cpp\n#include <torch/torch.h>\nint main() {}\n```",
            {"repro_present"},
            {"repro_missing"},
        ),
        # collect_env lists installed packages: NCCL there is not a distributed signal.
        (
            "### Versions\n[pip3] nvidia-nccl-cu12==2.27.5\nIs CUDA available: True\n",
            set(),
            {"c10d"},
        ),
        ("[conda] nvidia-nccl-cu12 2.27.5 pypi_0", set(), {"c10d"}),
        ("### Versions\n[pip3] torch\n### Logs\nNCCL watchdog timeout", {"c10d"}, set()),
    ],
)
def test_signal_failure_modes(text, present, absent):
    found = signals_of(text)
    assert present <= found, found
    assert not (absent & found), found


def corpus_sources():
    import json

    for path in (loader.RUBRICS_DIR.parent / "demo" / "issues.jsonl",):
        for line in path.read_text().splitlines():
            raw = json.loads(line)
            yield (
                raw["number"],
                IssueInput(
                    raw["number"],
                    raw["title"],
                    raw["body"] or "",
                    (),
                    tuple((c["id"], c["body"]) for c in raw.get("comments") or []),
                ).sources(),
            )


def test_the_keyword_prefilter_never_changes_what_is_found():
    from triage.rubric.signals import scan

    checked = 0
    for number, sources in corpus_sources():
        assert scan(sources) == scan(sources, prefilter=False), number
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize(
    "text",
    [
        "aot_eager:\n passes, and inductor\nfails",
        "İstanbul build: works on CUDA but fails on CPU",  # lower() changes the length here
        "x" * 3000 + "\nSegmentation fault (core dumped)\n" + "y" * 3000,
        # Keywords that count only as words: inside a path or identifier they are skipped.
        'File "torch/_inductor/scheduler.py"\nbackend="inductor" fails, aot_eager works',
        "my_inductor_fails\n_aot_eager works\nbackend='eager' works\nScheduleGPipe hangs",
        "inductor\nfails with inductor. Dynamo, eager backend: passes",
        # Two hits on neighbouring lines: the second line's own next line is searched too.
        "a\nsee aot_eager\nand aot_eager:\n passes\n" + "z\n" * 300 + "inductor fails",
    ],
)
def test_the_prefilter_agrees_on_awkward_text(text):
    from triage.rubric.signals import TextSource, scan

    sources = [TextSource("body", text)]
    assert scan(sources) == scan(sources, prefilter=False)


def test_an_already_classified_distributed_issue_only_gets_ptd_bot_triaged():
    labels = ("oncall: distributed", "oncall: distributed parallelisms", "module: fsdp")
    body = "FSDP hangs at step 3, no repro yet. Segmentation fault (core dumped)"
    draft = propose(loader.load("distributed"), issue(body, labels=labels))
    assert draft.rules_fired == ("dist-already-classified",)
    assert draft.add == ("ptd-bot-triaged",)


def test_a_sub_oncall_alone_is_not_classified():
    labels = ("oncall: distributed", "oncall: distributed parallelisms")
    body = "fully_shard(model) hangs\n```python\nimport torch\n```"
    draft = propose(loader.load("distributed"), issue(body, labels=labels))
    assert "dist-already-classified" not in draft.rules_fired
    assert "module: fsdp" in draft.add
    # The existing sub-oncall is kept and no second one is added.
    assert not any(label.startswith("oncall: distributed ") for label in draft.add)


def test_the_high_priority_flow_leaves_ptd_bot_triaged_off():
    body = "DDP training segfaults: Segmentation fault (core dumped)\n```python\nimport torch\n```"
    draft = propose(loader.load("distributed"), issue(body, labels=("oncall: distributed",)))
    assert "triage review" in draft.add
    assert "module: ddp" in draft.add
    assert "ptd-bot-triaged" not in draft.add


def test_a_vague_distributed_report_gets_review_not_a_guessed_module():
    body = "Multi-node training is slow on rank 3, not sure why."
    draft = propose(loader.load("distributed"), issue(body, labels=("oncall: distributed",)))
    assert set(draft.add) == {"triage review", "ptd-bot-triaged"}
    assert draft.template == ""


def test_a_rule_on_an_unknown_label_condition_is_refused(rubric_copy):
    rules = rubric_copy / "rules.toml"
    rules.write_text(
        rules.read_text() + RULE.replace('when = ["graph_break"]', 'has_labels = ["nope"]')
    )
    with pytest.raises(loader.RubricError, match="unknown label 'nope'"):
        loader.load_from(rubric_copy)


def test_a_finished_triage_adds_triaged():
    body = "```\ntorch._dynamo.exc.Unsupported: call_method\n```"
    draft = propose(loader.load("pt2"), issue(body))
    assert draft.add[-1] == "triaged"
    assert any(c.rule == "completion" and c.section == "done" for c in draft.citations)


@pytest.mark.parametrize(
    ("body", "labels"),
    [
        # Waiting on the meeting.
        ("torch._dynamo.exc.Unsupported: x\nSegmentation fault (core dumped)", ("oncall: pt2",)),
        # Handed to another team.
        ("torch.export.export(m, args) rejects the model", ("oncall: pt2",)),
        # Already waiting on the reporter.
        ("torch._dynamo.exc.Unsupported: x", ("oncall: pt2", "needs reproduction")),
        # No component named.
        ("It is slow, please help.\n```python\nimport torch\n```", ("oncall: pt2",)),
    ],
)
def test_an_unfinished_triage_does_not(body, labels):
    draft = propose(loader.load("pt2"), issue(body, labels=labels))
    assert "triaged" not in draft.add


def test_devset_covers_every_rule_of_every_rubric():
    """The labelled set backs every rule with at least one issue on which it fires."""
    import json

    from triage.rubric.engine import IssueInput as Input

    path = loader.RUBRICS_DIR.parent / "devset" / "issues.jsonl"
    fired: dict[str, set[str]] = {name: set() for name in loader.available()}
    queue_labels = {"pt2": ("oncall: pt2",), "distributed": ("oncall: distributed",), "triage": ()}
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        labels = tuple(raw.get("intake_labels") or queue_labels[raw["queue"]])
        comments = tuple((c["id"], c["body"]) for c in raw["comments"])
        case = Input(raw["number"], raw["title"], raw["body"] or "", labels, comments)
        fired[raw["queue"]].update(propose(loader.load(raw["queue"]), case).rules_fired)
    for name in loader.available():
        missing = {rule.id for rule in loader.load(name).rules} - fired[name]
        assert not missing, (name, sorted(missing))


@pytest.mark.parametrize(
    ("text", "present", "absent"),
    [
        (
            "No torch.compile involved, this is plain torch.export.export",
            {"export_used"},
            {"torch_compile_call"},
        ),
        ("throughput down 18% from 2.10", {"perf_regression"}, set()),
        ("tokens/s: That's -14%.", {"perf_regression"}, set()),
        ("3% slower on our small MLP", set(), {"perf_regression"}),
        ('a cryptic AttributeError "no attribute _spec"', {"error_message"}, set()),
        ("RuntimeError: could not find a kernel", set(), {"error_message"}),
        ('`mode="max-autotune"` on CPU picks the cpp_gemm_template and fails', {"mkldnn"}, set()),
        (
            '  File "/usr/lib/python3.12/site-packages/torch/export/_trace.py", line 1',
            {"export_used"},
            set(),
        ),
        ("LayerNorm in bfloat16 returns NaN", {"dtype", "numerical"}, set()),
    ],
)
def test_more_signal_failure_modes(text, present, absent):
    found = signals_of(text)
    assert present <= found, found
    assert not (absent & found), found


def test_a_proposal_that_completes_triage_is_no_surer_than_the_completion():
    rubric = loader.load("pt2")
    assert rubric.completion is not None and rubric.completion.confidence < 1.0
    draft = propose(rubric, issue("", title="[dynamo] frozen dataclass fields are not guarded"))
    assert "triaged" in draft.add
    assert draft.score == rubric.completion.confidence


def test_completion_is_blocked_by_a_label_outside_the_vocabulary():
    # The first-level bot's `bot-triaged` is not the pt2 oncall's to add, but it blocks `triaged`.
    rubric = loader.load("pt2")
    title = "[dynamo] frozen dataclass fields are not guarded"
    draft = propose(rubric, issue("", title=title, labels=("oncall: pt2", "bot-triaged")))
    assert "module: dynamo" in draft.add and "triaged" not in draft.add


def title_signals(title: str) -> set[str]:
    return set(extract([TextSource("title", title)]))


@pytest.mark.parametrize(
    ("title", "present", "absent"),
    [
        ("[Inductor][CPU] LayerNorm is slow", {"tag_inductor", "tag_cpu"}, {"tag_dynamo"}),
        ("[dynamo, guards] a guard is missing", {"tag_dynamo"}, set()),
        ("[aarch64 linux] compile crashes", {"tag_cpu"}, set()),
        ("[dynamic shapes] unbacked size fails", {"tag_dynamic_shapes"}, set()),
        ("Inductor produces NaNs", {"title_inductor"}, {"tag_inductor"}),
        # AOTInductor is not Inductor's title word.
        ("AOTInductor package fails to load", {"aoti"}, {"title_inductor"}),
        ("DISABLED test_allreduce (__main__.ProcessGroupNCCLTest)", {"disabled_test"}, set()),
    ],
)
def test_title_signal_failure_modes(title, present, absent):
    found = title_signals(title)
    assert present <= found, found
    assert not (absent & found), found


@pytest.mark.parametrize(
    ("text", "present", "absent"),
    [
        ("torch._inductor.exc.CppCompileError: C++ compile error", {"cpp_compile"}, set()),
        # Inductor's C++ wrapper serves CUDA too: not a CPU signal.
        ("TORCHINDUCTOR_CPP_WRAPPER=1 fails", set(), {"mkldnn", "cpp_compile"}),
        ("register_fake returns the wrong strides", {"dispatcher_terms"}, set()),
        ("mark_dynamic on dim 0 specializes", {"dynamic_terms"}, set()),
        ("AssertionError: Dict types must use ConstDictVariable", {"dynamo_terms"}, set()),
        ("Fused AdamW is not supported with FSDP2", {"fsdp"}, set()),
        ("We don't use FSDP at all", set(), {"fsdp"}),
        ("model = parallelize_module(model, mesh, plan)", {"tensor_parallel"}, {"dtensor"}),
        ("Operator aten.select.int does not have a sharding strategy", {"dtensor"}, set()),
        ("## Motivation\nWe plan to rework the store.", {"design_doc"}, {"feature_request"}),
        ("Traceback (most recent call last):", {"code_or_trace"}, set()),
        ("compiled output differs from eager by 1e-2", {"eager_divergence"}, set()),
        ("it stopped working in 2.7", {"regression"}, set()),
    ],
)
def test_signals_found_on_real_issues(text, present, absent):
    found = signals_of(text)
    assert present <= found, found
    assert not (absent & found), found


def test_a_described_body_is_one_of_some_length():
    assert "described" in signals_of("It fails. " * 30)
    assert "described" not in signals_of("It fails.")


def test_a_rule_may_close_only_where_the_vocabulary_says_so(rubric_copy):
    rules = rubric_copy / "rules.toml"
    text = rules.read_text()
    rules.write_text(text + RULE.replace('id = "extra"', 'id = "extra"\nclose = true'))
    with pytest.raises(loader.RubricError, match="does not set may_close"):
        loader.load_from(rubric_copy)


def test_may_close_is_parsed_strictly(rubric_copy):
    vocabulary = rubric_copy / "vocabulary.toml"
    vocabulary.write_text(vocabulary.read_text() + '\nmay_close = "false"\n')
    with pytest.raises(loader.RubricError, match="may_close must be true or false"):
        loader.load_from(rubric_copy)


def test_the_guard_drops_a_close_the_queue_may_not_make():
    rubric = loader.load("pt2")
    guarded = guard(rubric, draft(close=True), ["oncall: pt2"])
    assert guarded.close is False
    assert any(d.action == "close" for d in guarded.dropped)
    assert guard(loader.load("triage"), draft(close=True), []).close is True


def test_the_same_text_is_scanned_once_and_a_changed_text_again():
    from triage.rubric.signals import TextSource, extract

    body = "torch.compile fails: torch._dynamo.exc.Unsupported: call_function"
    first = extract([TextSource("title", "a"), TextSource("body", body)])
    assert extract([TextSource("title", "a"), TextSource("body", body)]) is first
    # Where one source ends and the next begins is part of the content.
    assert extract([TextSource("title", "a" + body[:1]), TextSource("body", body[1:])]) is not first
    changed = extract(
        [TextSource("title", "a"), TextSource("body", body.replace("fails", "works"))]
    )
    assert changed is not first
