"""Signals read from an issue's text, each with the exact span that shows it.

A signal is a named fact about an issue ("the traceback has frames in torch/_inductor", "the
reporter says dynamic=False fixes it"). Rules are conditions on signals; the spans become the
quoted evidence a proposal cites, so a reviewer sees why a rule fired.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ahocorasick

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# Bots add "cc @user ..." lines after labelling: they say who was notified, not what is wrong.
CC_LINE = re.compile(r"^[ \t]*cc[ \t]+@.*$", re.MULTILINE | re.IGNORECASE)
# collect_env output lists every installed package ("[pip3] nvidia-nccl-cu12==2.27"): it says
# what is installed, not what the bug involves. Its "Versions" section is blanked to the next
# heading, and so are package lines pasted elsewhere.
VERSIONS_HEADING = re.compile(r"#+[ \t]*versions[ \t]*$")
PACKAGE_TAG = re.compile(r"\[(?:pip3?|conda)\]")
HASH = re.compile("#")
# A script that uses torch, in Python or C++ (libtorch).
REPRO_CODE = re.compile(r"^\s*(import torch|from torch|#include <torch/)", re.MULTILINE)
CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
# "not a regression", "no segfault", "doesn't crash": a negation shortly before the match.
# "Not supported with FSDP2" and "doesn't work with DDP" are bugs in the thing, not denials of it.
NEGATION = re.compile(
    r"\b(not|no|never|without|isn't|doesn't|didn't|don't|nor|aren't|wasn't)\b"
    r"(?!\s+(?:supported|working|compatible|work|works|respected|honou?red|have|has)\b)[^.,;:!?\n]{0,28}$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Evidence:
    signal: str
    source: str  # "title", "body" or "comment:<id>"
    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class TextSource:
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class SignalSpec:
    name: str
    description: str
    pattern: re.Pattern[str]
    # Lower-case literals, one of which is in every match. Scanning a 5 KB issue with forty
    # case-insensitive patterns costs milliseconds; str.find for the keywords costs microseconds,
    # and the pattern then runs only on the lines around a hit. None: always run the pattern.
    keywords: tuple[str, ...] | None
    title_only: bool = False
    negatable: bool = False
    # Keywords that count only as whole words, for patterns that demand a word boundary there:
    # "inductor" is on every line of an Inductor traceback as "torch/_inductor/", never as a word.
    words: tuple[str, ...] = ()


# Backend ablation phrases, in either order: "aot_eager works", "fails with inductor".
# `(?<!aot_)` keeps "aot_eager" from counting as the eager backend.
_BACKEND = (
    r"""(?:backend\s*=\s*)?["'`]{{0,2}}(?<![\w])(?<!aot_){0}(?![\w])["'`]{{0,2}}(?:\s+backend)?"""
)
# "Eager is fine" usually means "without compile", not the eager backend: demand the backend.
_EAGER_BACKEND = (
    r"""(?:backend\s*=\s*["'`]{1,2}eager["'`]{1,2}|["'`]eager["'`]\s+backend|\beager backend)"""
)
# A tag in a title: "[Inductor]", "[CPU][inductor]", "[dynamo, guards]".
_TAG_OPEN = r"\[(?:[^\]\n]*[\s,/|])?"
_TAG_CLOSE = r"(?:[\s,/|][^\]\n]*)?\]"
_THEN = r"[\s:,)=-]{0,6}(?:(?:also|still|it|backend)\s+){0,2}"
_WITH = r"\s+(?:with|on|using|under|for)\s+(?:the\s+)?"
_WORKS = r"(?:works|passes|is fine|succeeds|runs fine|ok)\b"
_FAILS = r"(?:fails|errors|crashes|breaks|raises|is wrong)\b"


def _spec(
    name: str,
    description: str,
    pattern: str,
    keywords: tuple[str, ...] | None,
    *,
    title_only: bool = False,
    negatable: bool = False,
    words: tuple[str, ...] = (),
) -> SignalSpec:
    compiled = re.compile(pattern, re.IGNORECASE)
    if words:
        keywords = (*(keywords or ()), *words)
    return SignalSpec(name, description, compiled, keywords, title_only, negatable, words)


# Text signals. Derived signals (computed from these) are in `derive` below.
SIGNALS: tuple[SignalSpec, ...] = (
    _spec(
        "graph_break",
        "Dynamo could not trace something: Unsupported / graph break",
        r"torch\._dynamo\.exc\.Unsupported|\bUnsupported: |\bgraph[ _-]breaks?\b",
        ("unsupported", "graph break", "graph_break", "graph-break"),
    ),
    _spec(
        "internal_dynamo_error",
        "InternalTorchDynamoError",
        r"\bInternalTorchDynamoError\b",
        ("internaltorchdynamoerror",),
    ),
    _spec(
        "backend_compiler_failed",
        "BackendCompilerFailed (InductorError since 2.8)",
        r"\bBackendCompilerFailed\b|\bInductorError\b",
        ("backendcompilerfailed", "inductorerror"),
    ),
    _spec(
        "recompile_limit",
        "Recompilation limit reached",
        r"\bRecompileError\b|\b(cache_size_limit|recompile_limit)\b|hit config\.\w*limit",
        ("recompileerror", "cache_size_limit", "recompile_limit", "hit config."),
    ),
    _spec(
        "data_dependent",
        "Data-dependent guard or symbol",
        r"GuardOnDataDependentSymNode|data[- ]dependent|\bUnbacked\w*Sym|\bu\d+ \(unbacked",
        ("datadependent", "data-dependent", "data dependent", "unbacked"),
    ),
    _spec(
        "dynamic_false_fixes",
        "The reporter says dynamic=False makes it pass",
        r"dynamic\s*=\s*False[^\n]{0,80}?\b(works|fixes|passes|is fine|succeeds|goes away|no error)"
        r"|\b(works|passes|fine|succeeds)\b[^\n]{0,40}?dynamic\s*=\s*False",
        ("dynamic",),
    ),
    _spec(
        "guard_failure",
        "Guard failures or SymInt trouble",
        r"(?<!following )\bguard failure|\bSymInt\b|\bSymFloat\b|\bsymbolic shape",
        ("guard failure", "symint", "symfloat", "symbolic shape"),
    ),
    _spec(
        "frames_dynamo", "Traceback frames in torch/_dynamo", r"torch/_dynamo/", ("torch/_dynamo/",)
    ),
    _spec(
        "frames_inductor",
        "Traceback frames in torch/_inductor",
        r"torch/_inductor/",
        ("torch/_inductor/",),
    ),
    _spec(
        "frames_aot_autograd",
        "Traceback frames in AOT autograd",
        r"torch/_functorch/_aot_autograd/|torch/_functorch/aot_autograd\.py",
        ("torch/_functorch/",),
    ),
    _spec(
        "ablation_aot_eager_works",
        "The aot_eager backend works",
        rf"{_BACKEND.format('aot_eager')}{_THEN}{_WORKS}|{_WORKS}{_WITH}{_BACKEND.format('aot_eager')}",
        None,
        words=("aot_eager",),
    ),
    _spec(
        "ablation_inductor_fails",
        "The inductor backend fails",
        rf"{_BACKEND.format('inductor')}{_THEN}{_FAILS}|{_FAILS}{_WITH}{_BACKEND.format('inductor')}",
        None,
        words=("inductor",),
    ),
    _spec(
        "ablation_aot_eager_fails",
        "The aot_eager backend fails",
        rf"{_BACKEND.format('aot_eager')}{_THEN}{_FAILS}|{_FAILS}{_WITH}{_BACKEND.format('aot_eager')}",
        None,
        words=("aot_eager",),
    ),
    _spec(
        "ablation_eager_works",
        'The "eager" backend (Dynamo only) works',
        rf"{_EAGER_BACKEND}{_THEN}{_WORKS}|{_WORKS}{_WITH}{_EAGER_BACKEND}",
        None,
        words=("eager",),
    ),
    _spec(
        "cpu_only",
        "Fails on CPU only",
        r"\[CPU\]|\bCPU[- ]only\b|only (fails |happens |reproduces )?(on|with) (the )?CPU"
        r"|works (fine )?on (CUDA|GPU)[^\n.]{0,30}?\bfails on CPU|fails on CPU[^\n.]{0,30}?works (fine )?on (CUDA|GPU)",
        ("cpu",),
        negatable=True,
    ),
    _spec(
        "cuda_scope",
        "Mentions CUDA or a GPU",
        r"\bCUDA\b|\bGPU\b|\bcuda:\d|device=[\"']cuda",
        ("cuda", "gpu"),
    ),
    _spec(
        "mkldnn",
        "MKLDNN / oneDNN codegen",
        # Not cpp_wrapper: Inductor's C++ wrapper serves CUDA too.
        r"\bmkldnn\b|\boneDNN\b|\bcpp codegen|\bcpp_gemm\w*|codegen/cpp\.py|\bCPP GEMM",
        ("mkldnn", "onednn", "cpp codegen", "cpp_gemm", "codegen/cpp.py", "cpp gemm"),
    ),
    _spec(
        "crash",
        "A crash: segfault, illegal memory access, device-side assert",
        r"Segmentation fault|\bSIGSEGV\b|illegal memory access|device-side assert|core dumped"
        r"|\bSIGABRT\b|Fatal Python error",
        (
            "segmentation fault",
            "sigsegv",
            "illegal memory access",
            "device-side assert",
            "core dumped",
            "sigabrt",
            "fatal python error",
        ),
        negatable=True,
    ),
    _spec(
        "silent_wrong",
        "Silently wrong results",
        r"\b(wrong|incorrect) (results?|outputs?|values|numerics|gradients?)\b"
        r"|outputs? (differs?|mismatch)|accuracy (mismatch|failure|issue)|differs? from eager"
        r"|silently (wrong|incorrect|produces|returns|gives|computes|corrupt)"
        r"|\ballclose\b[^\n]{0,30}False|\bmismatched elements\b",
        (
            "wrong",
            "incorrect",
            "output",
            "accuracy",
            "differ",
            "allclose",
            "mismatched",
            "silently",
        ),
        negatable=True,
    ),
    _spec(
        "regression",
        "A regression: it used to work",
        r"\bused to work\b|\bregress(ion|ed)\b|\bworked (fine )?(in|on|with) (v|version |torch |\d)"
        r"|\bbroke (in|after|since) \d|\bstopped working\b|\bno longer works?\b",
        ("used to work", "regress", "worked", "broke", "stopped working", "no longer work"),
        negatable=True,
    ),
    _spec("fuzzer", "Found by a fuzzer", r"\bfuzz(er|ers|ing|ed)?\b", ("fuzz",)),
    _spec(
        "compile_used",
        "torch.compile is involved",
        r"torch\.compile|@torch\.compile|\bdynamo\b|\binductor\b|\bcompiled?\b model",
        ("torch.compile", "compile model", "compiled model"),
        words=("dynamo", "inductor"),
    ),
    _spec(
        "export_used",
        "torch.export is involved (named, or in the traceback's frames)",
        r"torch\.export\b|torch\._export\b|\bExportedProgram\b|\bexport\.export\(|torch/_?export/",
        (
            "torch.export",
            "torch._export",
            "exportedprogram",
            "export.export(",
            "torch/export/",
            "torch/_export/",
        ),
    ),
    _spec(
        "flex_attention",
        "Flex attention",
        r"\bflex_attention\b|\bFlexAttention\b|flex attention",
        ("flex_attention", "flexattention", "flex attention"),
    ),
    _spec(
        "functorch_transform",
        "A functorch transform (grad, vmap, vjp, jacrev)",
        r"torch\.func\.\w+|\bfunctorch\b|\bvmap\(|\bjacrev\(|\bjacfwd\(|\bvjp\(",
        ("torch.func.", "functorch", "vmap(", "jacrev(", "jacfwd(", "vjp("),
    ),
    _spec(
        "fsdp",
        "FSDP / fully_shard",
        r"\bFSDP2?\b|\bfully_shard\b|FullyShardedDataParallel|\bflat_param\w*|\bFlatParameter\b"
        r"|\bRESHARD_AFTER_FORWARD\b",
        (
            "fsdp",
            "fully_shard",
            "fullyshardeddataparallel",
            "flat_param",
            "flatparameter",
            "reshard_after_forward",
        ),
        negatable=True,
    ),
    _spec(
        "ddp",
        "DistributedDataParallel",
        r"\bDDP\b|DistributedDataParallel|Expected to have finished reduction|\bfind_unused_parameters\b"
        r"|\bstatic_graph\b|\bDDPOptimizer\b",
        (
            "ddp",
            "distributeddataparallel",
            "expected to have finished reduction",
            "find_unused_parameters",
            "static_graph",
        ),
        negatable=True,
    ),
    _spec(
        "dtensor",
        "DTensor itself: placements, sharding strategies, redistribution",
        r"\bDTensor\b|\bDistributed Tensor\b|\bOffsetBasedRNGTracker\b|\bdistribute_tensor\b"
        r"|\bShard\(\d\)|\bReplicate\(\)|\b_StridedShard\b"
        r"|\bsharding (?:strategy|strategies|propagation|rule)\b|\bredistribute\(|\bfrom_local\(",
        (
            "dtensor",
            "distributed tensor",
            "offsetbasedrngtracker",
            "distribute_tensor",
            "shard(",
            "replicate()",
            "_stridedshard",
            "sharding strateg",
            "sharding propagation",
            "sharding rule",
            "redistribute(",
            "from_local(",
        ),
        negatable=True,
    ),
    # Tensor parallel is built on DTensor, but its issues are not labelled `module: dtensor`.
    _spec(
        "tensor_parallel",
        "Tensor, sequence or context parallel APIs",
        r"torch\.distributed\.tensor\.(?:parallel|experimental)|\bparallelize_module\b"
        r"|\b(?:Colwise|Rowwise|Sequence)Parallel\b|\bPrepareModule(?:Input|Output)\b|\bloss_parallel\b"
        r"|\bcontext_parallel\b",
        (
            "torch.distributed.tensor.",
            "parallelize_module",
            "colwiseparallel",
            "rowwiseparallel",
            "sequenceparallel",
            "preparemodule",
            "loss_parallel",
            "context_parallel",
        ),
    ),
    _spec(
        "c10d",
        "Process groups, collectives and their backends",
        r"\bProcessGroup\w*|\ball_reduce\b|\ball_gather\w*|\breduce_scatter\w*|\bbroadcast\("
        r"|\bNCCL\b|\bnccl\w*Error\b|\bNCCL_\w+|\bGloo\b|init_process_group|\bTCPStore\b|\bc10d\b"
        r"|\bDeviceMesh\b|init_device_mesh|\ball_to_all\w*|\bbatch_isend_irecv\b|\bnew_group\b"
        r"|\bRendezvous\w*|\bdestroy_process_group\b|\bsymmetric memory\b|\bsymm_mem\b"
        r"|\bncclResult\w*|\bPostLocalSGD\w*|\bmodel averaging\b|test/distributed/"
        r"|\(__main__\.\w*(?:Nccl|Gloo|C10d|Comm|Distributed)\w*\)",
        (
            "processgroup",
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "broadcast(",
            "nccl",
            "gloo",
            "init_process_group",
            "tcpstore",
            "c10d",
            "devicemesh",
            "init_device_mesh",
            "all_to_all",
            "batch_isend_irecv",
            "new_group",
            "rendezvous",
            "destroy_process_group",
            "symmetric memory",
            "symm_mem",
            "ncclresult",
            "postlocalsgd",
            "model averaging",
            "test/distributed/",
            "(__main__.",
        ),
    ),
    _spec(
        "elastic",
        "torchrun / elastic",
        r"\btorchrun\b|torch\.distributed\.elastic|\belastic agent",
        ("torchrun", "torch.distributed.elastic", "elastic agent"),
    ),
    _spec(
        "checkpoint",
        "Distributed checkpointing (DCP, state-dict utilities)",
        r"torch\.distributed\.checkpoint|\bDCP\b|\bdcp\.(save|load|async_save)"
        r"|\b(get|set)_(model_|optimizer_)?state_dict\b|\basync_save\b|\b(?:Save|Load)Planner\b"
        r"|\bDistributed checkpoint\b|\[checkpoint\]|\bsave_state_dict\b|\bFileSystem(?:Writer|Reader)\b",
        (
            "torch.distributed.checkpoint",
            "dcp",
            "state_dict",
            "async_save",
            "planner",
            "distributed checkpoint",
            "[checkpoint]",
            "filesystemwriter",
            "filesystemreader",
        ),
    ),
    _spec(
        "pipelining",
        "Pipeline parallelism",
        r"torch\.distributed\.pipelining|\bpipeline parallel|\bpipelining\b"
        r"|\bSchedule(?:GPipe|1F1B|Interleaved\w*|ZBV\w*|LoopedBFS)\b|\bPipelineStage\b",
        (
            "torch.distributed.pipelining",
            "pipeline parallel",
            "pipelining",
            "schedulegpipe",
            "schedule1f1b",
            "scheduleinterleaved",
            "schedulezbv",
            "scheduleloopedbfs",
            "pipelinestage",
        ),
    ),
    _spec(
        "rpc",
        "torch.distributed.rpc",
        r"torch\.distributed\.rpc|\brpc_sync\b|\brpc_async\b|\bRRef\b|\bTensorPipe\w*|\b\w*RpcTest\w*",
        ("torch.distributed.rpc", "rpc_sync", "rpc_async", "rref", "tensorpipe", "rpctest"),
    ),
    _spec(
        "question_title",
        "The title asks a question",
        r"^\s*(how (do|can|to|should)|what is|why does|is (it|there) (a way|possible)|can i)\b|\?\s*$",
        None,
        title_only=True,
    ),
    _spec(
        "question_body",
        "The body asks how to do something",
        r"\bhow (do|can|should) (i|we|one)\b|\bis there a way to\b|\bwhat is the (right|best|recommended) way\b",
        ("how do", "how can", "how should", "is there a way to", "what is the"),
    ),
    _spec(
        "feature_request",
        "Asks for new functionality",
        r"###\s*🚀 The feature|##\s*🚀 Feature|\bfeature request\b|\bplease add (support|an? )"
        r"|\bwould be (nice|great) to (have|support)",
        (
            "the feature",
            "🚀 feature",
            "feature request",
            "please add",
            "would be nice",
            "would be great",
        ),
    ),
    _spec(
        "design_doc",
        "A maintainer's plan rather than a report: an RFC, a tracker, a design",
        r"\[RFC\]|\bRFC\b|^#+\s*Motivation\b|\bTracker\b|\[Main Issue\]|\[Beta\]|\bfollow[ -]ups\b",
        ("rfc", "motivation", "tracker", "[main issue]", "[beta]", "follow"),
    ),
    _spec(
        "external_dependency",
        "The reproducer needs files or setup we do not have",
        r"\b(my|our) (private |internal |production )?(model|dataset|checkpoint|weights|code)\b"
        r"|\b(?:cannot|can't|can not|unable to) share\b"
        r"|\bdownload\w* (the|my)\b|\binternal (code|repo)\b",
        ("my ", "our ", "share", "download", "internal "),
    ),
    _spec(
        "triton",
        "Triton kernels: compilation errors, asserts, generated kernels",
        r"\btriton\.compiler\b|\bTriton compilation\b|\bCompilationError\b|\btriton_(poi|red|per|tem)_\w+|\btl\.\w+\(|\bTritonError\b",
        ("triton", "compilationerror", "tl."),
    ),
    _spec(
        "cudagraphs",
        "CUDA graphs (reduce-overhead)",
        r"\bcuda ?graphs?\b|\bcudagraph\w*|reduce-overhead",
        ("cuda graph", "cudagraph", "reduce-overhead"),
    ),
    _spec(
        "dtype",
        "A dtype the report names (half precision, bfloat16, int8, float8...)",
        r"\b(float16|half|fp16|bfloat16|bf16|float32|fp32|float64|double|int8|uint8|float8\w*|fp8)\b",
        ("float", "half", "fp16", "bf16", "fp32", "double", "int8", "fp8"),
    ),
    _spec(
        "torch_compile_call",
        "Calls torch.compile itself",
        r"torch\.compile\b",
        ("torch.compile",),
        negatable=True,
    ),
    _spec(
        "frames_distributed",
        "Traceback frames in torch/distributed",
        r"torch/distributed/",
        ("torch/distributed/",),
    ),
    _spec(
        "caching",
        "Compile caches (FX graph cache, AOT autograd cache)",
        r"\bfx ?graph ?cache|\bcache (hit|miss)|TORCHINDUCTOR_\w*CACHE|\bAOTAutogradCache\b|\bmega[- ]?cache|\bcompile cache",
        ("cache",),
    ),
    _spec(
        "determinism",
        "Determinism",
        r"\bnon-?determinis\w+|\bdeterministic\b|use_deterministic_algorithms",
        ("determinis",),
    ),
    _spec(
        "compile_time",
        "Compile or start-up time",
        r"\bcompil(e|ation) times?\b|\bslow to compile\b|\bcompil(es|ing) (takes|took)\b|\bcold[- ]start\b|\bwarm[- ]start\b",
        (
            "compile time",
            "compilation time",
            "slow to compile",
            "compiles take",
            "compiling take",
            "compiles took",
            "compiling took",
            "cold start",
            "cold-start",
            "warm start",
            "warm-start",
        ),
    ),
    _spec(
        "numerical",
        "Numerical stability: NaN, overflow, precision",
        r"\bnumerical(ly)? (instab\w+|stability|precision|issues?)|\boverflows?\b|\bunderflows?\b|\bNaNs?\b|\binf values?\b",
        ("numerical", "overflow", "underflow", "nan", "inf value"),
        negatable=True,
    ),
    _spec(
        "error_message",
        "A confusing error message",
        r"\b(confusing|misleading|unhelpful|unclear|cryptic|useless|bad|better)\b[^.\n]{0,30}?(error|message)"
        r"|\b(error )?messages?\b[^.\n]{0,40}?\b(confusing|misleading|unhelpful|wrong|unclear|useless|points at)"
        r"|\bthe message (leaks|hides|is (confusing|misleading|useless))",
        (
            "confusing",
            "misleading",
            "unhelpful",
            "unclear",
            "cryptic",
            "useless",
            "bad",
            "better",
            "wrong",
            "points at",
            "the message",
        ),
    ),
    _spec(
        "perf_regression",
        "A performance regression of 10% or more",
        r"\b([1-9]\d|\d{3,})(\.\d+)?\s?%\s+(slower|regression|drop|slowdown|worse)"
        r"|\b(slower|slowdown|regressed|worse|down|dropped|drop|lower)\b[^.\n%]{0,12}?-?([1-9]\d|\d{3,})(\.\d+)?\s?%"
        r"|(?<![\w.])-([1-9]\d|\d{3,})(\.\d+)?\s?%|\b\d+(\.\d+)?x slower\b",
        ("%", "x slower"),
        negatable=True,
    ),
    _spec(
        "performance",
        "About speed: faster, slower, throughput, latency",
        r"\b(faster|slower|throughput|latency|speed ?up|slowdown|performance)\b",
        ("faster", "slower", "throughput", "latency", "speed", "slowdown", "performance"),
    ),
    _spec(
        "distributed_vague",
        "Talks about distributed training without naming an API",
        r"\bdistributed\b|\bmulti-?(node|gpu|host)\b|\branks?\b|\bworld[_ ]size\b|\bdata parallel",
        ("distributed", "multi", "rank", "world", "data parallel"),
    ),
    _spec(
        "flaky",
        "A flaky test",
        r"\bflak(y|iness)\b|\bintermittent(ly)? fail",
        ("flak", "intermittent"),
    ),
    _spec(
        "important_user",
        "A widely used model or user (Hugging Face, vLLM, torchtitan)",
        r"\b(Hugging ?Face|transformers|diffusers|vLLM|torchtitan|Llama|timm)\b",
        ("hugging", "transformers", "diffusers", "vllm", "torchtitan", "llama", "timm"),
    ),
    _spec(
        "custom_tolerance",
        "Non-default comparison tolerances",
        r"\b[ar]tol\s*=\s*[0-9.e-]+",
        ("tol",),
    ),
    _spec(
        "enhancement_request",
        "Asks to improve something that already works",
        r"\b(currently|already) (works|supported|runs)|\bfalls? back to\b|\bfaster (path|kernel|implementation)|\bbetter error|\bspeed ?up\b|\bnative (support|implementation|backend|kernel)",
        ("currently", "already", "fall", "faster", "better error", "speed", "native"),
    ),
    _spec(
        "jit",
        "TorchScript",
        r"torch\.jit\.|\bTorchScript\b|\bScriptModule\b",
        ("torch.jit.", "torchscript", "scriptmodule"),
    ),
    _spec(
        "quantization",
        "Quantization",
        r"torch\.ao\.quantization|\bquantiz(e|ed|ation)\b|\bqconfig\b|\bfake_quant",
        ("quantiz", "qconfig", "fake_quant"),
    ),
    _spec(
        "profiler",
        "The profiler",
        r"torch\.profiler|\bprofiler\b|\bkineto\b|\bchrome trace",
        ("profiler", "kineto", "chrome trace"),
    ),
    _spec(
        "mobile",
        "Mobile (Android, iOS, lite interpreter)",
        r"\b(Android|iOS|lite interpreter|PyTorch Mobile|_load_for_lite_interpreter)\b",
        ("android", "ios", "lite interpreter", "pytorch mobile", "_load_for_lite_interpreter"),
    ),
    _spec(
        "releng",
        "Installing or building: wheels, binaries, nightlies",
        r"\bpip3? install\b[^\n]{0,80}\b(fails|error|cannot|no matching)|\bno matching distribution\b|\bwheels?\b[^\n]{0,40}\b(missing|broken|fails|not available)|\bnightly (build|wheel)s? (is |are )?(missing|broken|fail)|\bconda install\b[^\n]{0,60}\b(fails|conflict)",
        (
            "pip install",
            "pip3 install",
            "no matching distribution",
            "wheel",
            "nightly",
            "conda install",
        ),
    ),
    _spec(
        "fx",
        "torch.fx",
        # torch.fx.experimental is where symbolic shapes live: a dynamic-shapes error, not FX.
        r"torch\.fx\b(?!\.experimental)|\bsymbolic_trace\b|\bGraphModule\b",
        ("torch.fx", "symbolic_trace", "graphmodule"),
    ),
    # PyTorch's developers, and many reporters, tag a title with the component: "[dynamo]",
    # "[Inductor][CPU]", "[AOTI]". A tag is the reporter's or a maintainer's own routing.
    _spec(
        "tag_dynamo",
        "The title is tagged [dynamo]",
        rf"{_TAG_OPEN}(?:torch)?dynamo{_TAG_CLOSE}",
        ("dynamo",),
        title_only=True,
    ),
    _spec(
        "tag_inductor",
        "The title is tagged [inductor]",
        rf"{_TAG_OPEN}(?:torch)?inductor{_TAG_CLOSE}",
        ("inductor",),
        title_only=True,
    ),
    _spec(
        "tag_cpu",
        "The title is tagged [CPU], [x86], [aarch64] or [ARM]",
        rf"{_TAG_OPEN}(?:cpu|x86|x86_64|aarch64|arm|arm64|neon|sve|avx\w*){_TAG_CLOSE}",
        ("cpu", "x86", "aarch64", "arm", "neon", "sve", "avx"),
        title_only=True,
    ),
    _spec(
        "tag_dynamic_shapes",
        "The title is tagged [dynamic shapes]",
        rf"{_TAG_OPEN}(?:dynamic[ _-]?shapes?|dynamic|unbacked|symbolic[ _-]shapes?){_TAG_CLOSE}",
        ("dynamic", "unbacked", "symbolic"),
        title_only=True,
    ),
    _spec(
        "tag_export",
        "The title is tagged [export]",
        rf"{_TAG_OPEN}(?:torch\.)?export{_TAG_CLOSE}",
        ("export",),
        title_only=True,
    ),
    _spec(
        "tag_compile",
        "The title is tagged [pt2], [torch.compile] or [compile]",
        rf"{_TAG_OPEN}(?:pt2|torch\.compile|compile|compiled autograd|torch\.compiler){_TAG_CLOSE}",
        ("pt2", "compile"),
        title_only=True,
    ),
    _spec(
        "eager_divergence",
        "Compiled and eager results differ",
        r"\b(?:compile|compiled|inductor)\b[^\n]{0,40}?\b(?:mismatch|divergence|inconsistent|differs?|different)\b"
        r"|\bEager/Compile Divergence\b|\binconsistent (?:results|outputs?)\b[^\n]{0,40}?\b(?:eager|compile)"
        r"|\bdifferent (?:results?|outputs?|behaviou?r)\b[^\n]{0,20}?\b(?:from|than|vs\.?|compared to) (?:the )?eager",
        ("mismatch", "divergence", "inconsistent", "differ"),
        negatable=True,
    ),
    _spec(
        "title_inductor",
        "The title names Inductor",
        r"\binductor\b",
        ("inductor",),
        title_only=True,
    ),
    _spec(
        "disabled_test",
        "A test disabled by the flaky-test bot",
        r"^\s*DISABLED test\w*",
        ("disabled test",),
        title_only=True,
    ),
    _spec(
        "code_or_trace",
        "Shows code, a traceback or an error line",
        r"```|\bTraceback \(most recent call last\)|^\s*File \"|\w(?:Error|Exception): |<table\b",
        ("```", "traceback", 'file "', "error: ", "exception: ", "<table"),
    ),
    _spec(
        "cpp_compile",
        "Inductor's C++ (CPU) code generation or its compiler fails",
        r"\bCppCompileError\b|C\+\+ compile error|\bcpp_fused_\w+|codegen/cpp\.py|\bVecISA\b|\bvec_isa\b"
        r"|\.main\.cpp\b|\bInductor C\+\+ backend\b",
        (
            "cppcompileerror",
            "c++ compile error",
            "cpp_fused_",
            "codegen/cpp.py",
            "vecisa",
            "vec_isa",
            ".main.cpp",
            "inductor c++ backend",
        ),
    ),
    _spec(
        "arm_cpu",
        "An Arm or Apple-silicon CPU",
        r"\b(?:aarch64|arm64|Graviton\d*|NEON|SVE2?|Neoverse)\b|\bApple M[1-5]\b|\bM[1-5] (?:Pro|Max|Ultra|Mac)\b",
        (
            "aarch64",
            "arm64",
            "graviton",
            "neon",
            "sve",
            "neoverse",
            "apple m",
            " pro",
            " max",
            " ultra",
            " mac",
        ),
    ),
    _spec(
        "on_cpu",
        "Says it happens on the CPU",
        r"\b(?:on|for|with) (?:the )?CPU\b|\bCPU (?:backend|device|inductor|codegen)\b"
        r"|\bdevice\s*=\s*[\"']cpu[\"']",
        ("cpu",),
        negatable=True,
    ),
    _spec(
        "aoti",
        "AOTInductor: ahead-of-time compiled packages",
        r"\bAOT ?Inductor\w*|\bAOTI\w*|\baoti_\w+|\baot_inductor\b|\baot_compile\b|\.pt2\b",
        ("aot inductor", "aotinductor", "aoti", "aot_inductor", "aot_compile", ".pt2"),
    ),
    _spec(
        "dispatcher_terms",
        "Names a part of the PT2 dispatcher: AOT autograd, functionalization, FakeTensor, custom ops",
        r"\bFake ?Tensor\w*|\bfake_tensor\b|\bfunctionali[sz]\w*|\bauto_functionalized\w*"
        r"|\bAOT ?Autograd\b|\bAOTDispatch\w*|\bcustom[ _-]op(?:erator)?s?\b|\btorch\.library\b"
        r"|\bregister_fake\b|\bregister_autograd\b|\bFakeScriptObject\b|doesn't have storage"
        r"|\bhigher[ -]order op\w*|\bHOPs?\b|\bProxyTensor\b|\bDispatchKey\b",
        (
            "fake",
            "functionali",
            "aot autograd",
            "aotautograd",
            "aotdispatch",
            "custom",
            "torch.library",
            "register_fake",
            "register_autograd",
            "doesn't have storage",
            "higher",
            "hop",
            "proxytensor",
            "dispatchkey",
        ),
    ),
    _spec(
        "dynamic_terms",
        "Names dynamic-shape machinery: mark_dynamic, unbacked symbols, SymInt, constraint violations",
        r"\bmark_dynamic\b|\bmark_unbacked\b|\bmaybe_mark_dynamic\b|\bConstraintViolationError\b"
        r"|\bdynamic[ _]shapes?\b|\bsize[- ]like\b|\bunbacked\b|\bSym(?:Int|Bool|Float|Node)\b"
        r"|\bautomatic_dynamic\w*|\b(?:guard_)?size_oblivious\b|\bspecializ\w+|\bsize mismatch at index\b",
        (
            "mark_",
            "constraintviolation",
            "dynamic",
            "size-like",
            "size like",
            "unbacked",
            "sym",
            "specializ",
            "size_oblivious",
            "size mismatch at index",
        ),
    ),
    _spec(
        "dynamo_terms",
        "Names Dynamo's own machinery or the Python it must trace: bytecode, variable trackers,"
        " recompiles, side effects, dataclasses",
        r"\bbytecode\b|\bskipfiles\b|\btrace_rules\b|\bFailOnRecompileLimitHit\b|\bSourcelessBuilder\b"
        r"|\bVariableTracker\b|\b[A-Z]\w*Variable\b|\bcompiled[ _]autograd\b"
        r"|\brecompil(?:es|ing|ation|ations)\b|\bdoes not recompile\b|\[__(?:recompiles|guards)\]"
        r"|\bside[ -]effects?\b|\bdataclass(?:es)?\b|\bmagic methods?\b"
        r"|\bmutat\w+ (?:of )?(?:an? |the )?(?:attributes?|buffers?|globals?|class)"
        r"|\b(?:global|class attribute|attribute)s? (?:is |are )?mutated\b",
        (
            "bytecode",
            "skipfiles",
            "trace_rules",
            "failonrecompilelimithit",
            "sourcelessbuilder",
            "variable",
            "compiled autograd",
            "compiled_autograd",
            "recompil",
            "[__",
            "side effect",
            "side-effect",
            "dataclass",
            "magic method",
            "mutat",
        ),
    ),
)

SIGNAL_NAMES: frozenset[str] = frozenset(
    {spec.name for spec in SIGNALS}
    | {
        "repro_present",
        "repro_missing",
        "distributed_any",
        "no_distributed_api",
        "inductor_cpu_only",
        "pt2_involved",
        "described",
    }
)
SIGNAL_DESCRIPTIONS: dict[str, str] = {spec.name: spec.description for spec in SIGNALS} | {
    "repro_present": "A code block that imports torch",
    "repro_missing": "No self-contained reproducer",
    "distributed_any": "Uses a torch.distributed API",
    "no_distributed_api": "No torch.distributed API is used",
    "inductor_cpu_only": "Inductor fails, on CPU only",
    "pt2_involved": "torch.compile or one of its components is involved",
    "described": "The body describes the problem at some length",
}
# Below this a body says too little to judge whether a reproducer is missing.
DESCRIBED_CHARS = 200
FIRST_LINE = re.compile(r"\S[^\n]*")


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def mask_noise(text: str) -> tuple[str, str]:
    """The text with bot cc lines and the environment dump blanked, and its lower case.

    Blanked rather than deleted, so every span still points into the original text.
    """
    lowered = text.lower()
    if "cc @" in lowered or "cc\t@" in lowered:
        text = CC_LINE.sub(_blank, text)
        lowered = text.lower()
    hits = [
        i
        for i in (lowered.find("versions"), lowered.find("[pip"), lowered.find("[conda]"))
        if i >= 0
    ]
    if not hits:
        return text, lowered
    # The environment dump sits at the end: look at the lines from the first that may begin it.
    start = text.rfind("\n", 0, min(hits)) + 1
    noise: list[tuple[int, int]] = []
    versions_from = -1
    for heading_start in _line_starts_before(text, HASH.finditer(text, start), str.isspace):
        if versions_from >= 0:
            noise.append((versions_from, heading_start))
        line_end = text.find("\n", heading_start)
        line = text[heading_start : len(text) if line_end == -1 else line_end]
        is_versions = VERSIONS_HEADING.match(line.lstrip().lower()) is not None
        versions_from = heading_start if is_versions else -1
    if versions_from >= 0:
        noise.append((versions_from, len(text)))
    for line_start in _line_starts_before(text, PACKAGE_TAG.finditer(text, start), _spaces_or_tabs):
        line_end = text.find("\n", line_start)
        noise.append((line_start, len(text) if line_end == -1 else line_end))
    if not noise:
        return text, lowered
    pieces: list[str] = []
    lowered_pieces: list[str] = []
    done = 0
    for begin, end in sorted(noise):
        begin = max(begin, done)
        if end <= begin:
            continue
        blank = "\n".join(" " * len(line) for line in text[begin:end].split("\n"))
        pieces += (text[done:begin], blank)
        lowered_pieces += (lowered[done:begin], blank)
        done = end
    pieces.append(text[done:])
    lowered_pieces.append(lowered[done:])
    text = "".join(pieces)
    # Lower-casing may change the length of a few scripts: then the offsets differ.
    same_offsets = len(lowered) == len(text)
    return text, "".join(lowered_pieces) if same_offsets else text.lower()


def _spaces_or_tabs(prefix: str) -> bool:
    return not prefix.strip(" \t")


def _line_starts_before(
    text: str, matches: Iterator[re.Match[str]], blank: Callable[[str], bool]
) -> Iterator[int]:
    """The start of each line where a match comes first, after nothing but `blank` space.

    Cheaper than a multi-line `^` pattern, which Python's engine tries at every position.
    """
    last = -1
    for match in matches:
        line_start = text.rfind("\n", 0, match.start()) + 1
        if line_start != last and (
            line_start == match.start() or blank(text[line_start : match.start()])
        ):
            last = line_start
            yield line_start


def _negated(text: str, start: int) -> bool:
    line_start = text.rfind("\n", 0, start) + 1
    return NEGATION.search(text[max(line_start, start - 40) : start]) is not None


def _keyword_automaton() -> ahocorasick.Automaton:
    """Every keyword of every signal, found in one pass over a text (Aho-Corasick)."""
    anywhere: dict[str, list[str]] = defaultdict(list)
    as_word: dict[str, list[str]] = defaultdict(list)
    for spec in SIGNALS:
        for keyword in spec.keywords or ():
            owners = as_word if keyword in spec.words else anywhere
            owners[keyword].append(spec.name)
    automaton = ahocorasick.Automaton()
    for keyword in anywhere.keys() | as_word.keys():
        automaton.add_word(
            keyword, (len(keyword), tuple(anywhere[keyword]), tuple(as_word[keyword]))
        )
    automaton.make_automaton()
    return automaton


KEYWORDS = _keyword_automaton()
# A neighbour that certainly joins a keyword into a longer word (Unicode letters may too, but
# then the pattern still runs: the filter may only ever let too much through).
WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _keyword_hits(lowered: str) -> dict[str, list[int]]:
    """Where each signal's keywords start in the text."""
    hits: dict[str, list[int]] = defaultdict(list)
    for end, (length, anywhere, as_word) in KEYWORDS.iter(lowered):
        start = end - length + 1
        for name in anywhere:
            hits[name].append(start)
        if as_word and not (
            (start > 0 and lowered[start - 1] in WORD_CHARS)
            or (end + 1 < len(lowered) and lowered[end + 1] in WORD_CHARS)
        ):
            for name in as_word:
                hits[name].append(start)
    return hits


WINDOW_GAP = 400


def _windows(text: str, positions: list[int]) -> list[tuple[int, int]]:
    """Where a match may be: the line of each keyword hit with its neighbours, in text order.

    `positions` come in the order the keywords end; no keyword holds a newline, so their lines
    come in text order too.
    """
    windows: list[tuple[int, int]] = []
    last_line_start = -1
    for hit in positions:
        line_start = text.rfind("\n", 0, hit) + 1
        if line_start == last_line_start:
            continue
        last_line_start = line_start
        # A phrase may wrap once ("aot_eager:\n passes"): take the lines around the hit too.
        start = text.rfind("\n", 0, max(line_start - 1, 0)) + 1 if line_start else 0
        end = text.find("\n", hit)
        end = len(text) if end == -1 else text.find("\n", end + 1)
        end = len(text) if end == -1 else end
        # Neighbouring windows become one: a regex call costs more than the few lines between.
        if windows and start <= windows[-1][1] + WINDOW_GAP:
            windows[-1] = (windows[-1][0], max(end, windows[-1][1]))
        else:
            windows.append((start, end))
    return windows


def _first_match(spec: SignalSpec, text: str, spans: list[tuple[int, int]]) -> re.Match[str] | None:
    for start, end in spans:
        if not spec.negatable:
            match = spec.pattern.search(text, start, end)
            if match is not None:
                return match
            continue
        for match in spec.pattern.finditer(text, start, end):
            if not _negated(text, match.start()):
                return match
    return None


# An issue is proposed in each queue it is in, and again whenever a rubric changes: the same
# text need not be scanned twice. The key is the texts themselves (Python hashes a string once
# and keeps its hash), so a proposal of an issue already scanned costs a dictionary lookup.
SCANNED_CACHE_SIZE = 1024
_scanned: OrderedDict[tuple[tuple[str, str], ...], dict[str, list[Evidence]]] = OrderedDict()
_scanned_lock = threading.Lock()


def extract(sources: list[TextSource]) -> dict[str, list[Evidence]]:
    """Every signal found in the sources (see `scan`); the answer is shared: do not change it."""
    key = tuple((source.name, source.text) for source in sources)
    with _scanned_lock:
        found = _scanned.get(key)
        if found is not None:
            _scanned.move_to_end(key)
            return found
    found = scan(sources)
    with _scanned_lock:
        _scanned[key] = found
        if len(_scanned) > SCANNED_CACHE_SIZE:
            _scanned.popitem(last=False)
    return found


def scan(sources: list[TextSource], *, prefilter: bool = True) -> dict[str, list[Evidence]]:
    """Every signal found in the sources, with the span that shows it (first hit per source).

    `prefilter=False` scans every pattern over the whole text: slower, and the same answer.
    """
    found: dict[str, list[Evidence]] = {}
    for source in sources:
        text, lowered = mask_noise(source.text)
        # Lower-casing a few scripts changes the length, and then offsets would not line up.
        filtered = prefilter and len(lowered) == len(text)
        hits = _keyword_hits(lowered) if filtered else {}
        whole = [(0, len(text))]
        # Only the signals a keyword points at, and those without keywords, can be present.
        candidates = (
            [spec for spec in SIGNALS if spec.keywords is None or spec.name in hits]
            if filtered
            else SIGNALS
        )
        for spec in candidates:
            if spec.title_only and source.name != "title":
                continue
            spans = _windows(text, hits[spec.name]) if filtered and spec.keywords else whole
            match = _first_match(spec, text, spans)
            if match is not None:
                found.setdefault(spec.name, []).append(
                    Evidence(spec.name, source.name, match.start(), match.end(), match.group(0))
                )
        if source.name == "body" and len(text.strip()) >= DESCRIBED_CHARS:
            first_line = FIRST_LINE.search(text)
            found.setdefault("described", []).append(
                Evidence(
                    "described",
                    source.name,
                    0,
                    0,
                    first_line.group(0).strip()[:120] if first_line else "",
                )
            )
        if source.name != "title" and "```" in text:
            for block in CODE_BLOCK.finditer(text):
                if REPRO_CODE.search(block.group(1)):
                    start, end = block.span(1)
                    snippet = block.group(1).strip().splitlines()[0][:120]
                    found.setdefault("repro_present", []).append(
                        Evidence("repro_present", source.name, start, end, snippet)
                    )
                    break
    derive(found)
    return found


def derive(found: dict[str, list[Evidence]]) -> None:
    """Signals that are combinations of others."""
    if "repro_present" not in found:
        found["repro_missing"] = []
    distributed = [
        ev
        for name in (
            "fsdp",
            "ddp",
            "dtensor",
            "tensor_parallel",
            "c10d",
            "elastic",
            "checkpoint",
            "pipelining",
            "rpc",
        )
        for ev in found.get(name, [])
    ]
    if distributed:
        found["distributed_any"] = distributed[:1]
    else:
        found["no_distributed_api"] = []
    inductor = (
        found.get("ablation_inductor_fails")
        or found.get("frames_inductor")
        or found.get("backend_compiler_failed")
        or found.get("tag_inductor")
    )
    # "On CPU" in a compiled program's report points at the CPU backend unless the report is
    # about tracing (a graph break is the same on every device) or also names CUDA.
    tracing = ("graph_break", "dynamic_terms", "dynamo_terms", "tag_dynamo")
    compiled_on_cpu = (
        found.get("compile_used") if not any(name in found for name in tracing) else None
    )
    cpu = (
        found.get("cpu_only")
        or found.get("mkldnn")
        or found.get("tag_cpu")
        or found.get("arm_cpu")
        or (found.get("on_cpu") if "cuda_scope" not in found else None)
    )
    if found.get("cpp_compile"):
        found["inductor_cpu_only"] = found["cpp_compile"][:1]
    elif cpu and (inductor or compiled_on_cpu):
        found["inductor_cpu_only"] = [*cpu[:1], *(inductor or compiled_on_cpu or [])[:1]]
    pt2 = [ev for name in PT2_SIGNALS for ev in found.get(name, [])[:1]]
    if pt2:
        found["pt2_involved"] = pt2[:1]


# Any of these puts an issue in PT2's territory (torch.compile and what it is built of).
PT2_SIGNALS = (
    "compile_used",
    "tag_compile",
    "tag_dynamo",
    "tag_inductor",
    "tag_dynamic_shapes",
    "graph_break",
    "internal_dynamo_error",
    "backend_compiler_failed",
    "recompile_limit",
    "frames_dynamo",
    "frames_inductor",
    "cpp_compile",
    "flex_attention",
    "dynamo_terms",
)
