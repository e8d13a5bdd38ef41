"""What the similar-issue index reads from an issue: its words, and its traceback's frames and
exception types, which say more about where a bug lives than any word."""

from __future__ import annotations

import re

from triage.rubric.signals import mask_noise

# `File "/opt/conda/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", line 9, in _fn`
FRAME = re.compile(r'^[ \t>]*File "([^"\n]{1,500})", line \d+, in ([\w<>.]{1,200})', re.MULTILINE)
# `torch._dynamo.exc.Unsupported: ...`, `RuntimeError: ...` at the start of a line.
EXCEPTION = re.compile(
    r"^[ \t>]*((?:[A-Za-z_]\w*\.){0,6}(?:[A-Z]\w*)?(?:Error|Exception|Unsupported|Failure))(?=:)",
    re.MULTILINE,
)
# Where a package's path begins: everything before it is the reporter's machine.
PACKAGE_ROOTS = ("site-packages/", "dist-packages/")
# Only the beginning of a very long body is read: a megabyte of log says nothing more.
MAX_CHARS = 20_000


def frame_path(path: str) -> str:
    """A frame's file, without the part that differs from one machine to the next."""
    path = path.replace("\\", "/")
    for root in PACKAGE_ROOTS:
        if root in path:
            return path.rsplit(root, 1)[1]
    if "/torch/" in path:
        return "torch/" + path.rsplit("/torch/", 1)[1]
    return path.rsplit("/", 1)[-1]


def frames(text: str) -> list[str]:
    """The traceback's frames (`torch/_dynamo/eval_frame.py:_fn`) and exception types
    (`exception:RuntimeError`), in order, repeated as often as they appear."""
    text = text[:MAX_CHARS]
    found = [f"{frame_path(path)}:{function}" for path, function in FRAME.findall(text)]
    found += [f"exception:{name}" for name in EXCEPTION.findall(text)]
    return found


def words(title: str, body: str) -> str:
    """The text whose words are compared: the title counts twice, the bot's cc line and the
    environment dump not at all (every issue has one, and they are alike)."""
    masked, _ = mask_noise(body[:MAX_CHARS])
    return f"{title}\n{title}\n{masked}"
