"""A local HTTP stand-in for the slice of Anthropic's Messages API that the console uses.

Tests point the real ``anthropic`` SDK at it (``anthropic.Anthropic(base_url=standin.url)``) so
that every call crosses a real socket: the SDK's retries, its honouring of ``retry-after``, its
error classes and its JSON Lines decoding of batch results are exercised as they are against
api.anthropic.com. What the "model" answers is scripted per request with `Reply`.

Token counts are estimates (a token per four characters of JSON) so that the bookkeeping of
usage and cost sees plausible, deterministic numbers; prompt caching is emulated by remembering
the prefixes that requests marked with ``cache_control``.

Run it on its own, without Django::

    python -m triage.standins.anthropic --port 8766 --tool-input '{"score": 0.5}'
"""

from __future__ import annotations

import argparse
import collections
import copy
import hashlib
import json
import math
import re
import threading
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable
    from email.message import Message
    from types import TracebackType

REPLY_KINDS = frozenset({"tool", "text", "raw", "error"})
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
ERROR_MESSAGES = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "billing_error": "Your credit balance is too low to access the Anthropic API.",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "api_error": "Internal server error",
    "timeout_error": "Request timed out",
    "overloaded_error": "Overloaded",
}
NOTHING_SCRIPTED = "stand-in: nothing scripted for this request and no default_reply"
MAX_CACHE_BREAKPOINTS = 4
BATCH_LIFETIME = timedelta(hours=24)
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
JSON_TYPE = "application/json"
# The content type api.anthropic.com sends for batch results; the SDK decodes JSON Lines whatever
# the header says, but other clients key on it.
JSONL_TYPE = "application/x-jsonl"


@dataclass
class Reply:
    """One scripted answer of the "model" (or of the API in front of it)."""

    kind: str  # "tool", "text", "raw" or "error"
    tool_input: dict[str, Any] | None = None
    text: str = ""  # the text block of a "text" reply; the message of an "error" reply
    raw_body: bytes = b""
    status: int = 200  # of "error" and "raw" replies
    retry_after: float | None = None  # seconds, sent as `retry-after` on an "error" reply
    usage: dict[str, int] | None = None  # overrides the estimated usage, key by key

    def __post_init__(self) -> None:
        # A mistyped script would otherwise surface as a baffling answer requests later.
        if self.kind not in REPLY_KINDS:
            raise ValueError(f"Reply.kind must be one of {sorted(REPLY_KINDS)}, got {self.kind!r}")
        if self.kind == "tool" and self.tool_input is None:
            raise ValueError('a Reply(kind="tool") needs a tool_input')
        if self.kind == "error" and self.status < 400:
            raise ValueError(f'a Reply(kind="error") needs an error status, got {self.status}')


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # without the query string
    headers: dict[str, str]  # names lower-cased
    json: Any  # None for an empty or unparseable body


@dataclass
class BatchState:
    id: str
    requests: list[dict[str, Any]]  # {"custom_id": ..., "params": ...} as sent
    created_at: datetime
    expires_at: datetime
    ended_at: datetime | None = None
    succeeded: int = 0
    errored: int = 0
    # One JSON Lines entry per request, filled in by `finish_batch`.
    results: list[bytes] = field(default_factory=list)

    @property
    def processing_status(self) -> str:
        return "in_progress" if self.ended_at is None else "ended"


class _ApiError(Exception):
    """Raised inside a route to answer with an Anthropic-shaped error body."""

    def __init__(self, status: int, message: str | None = None, *, retry: bool = True) -> None:
        error_type = ERROR_TYPES.get(status, "api_error")
        super().__init__(status, message)
        self.status = status
        self.error_type = error_type
        self.message = message or ERROR_MESSAGES[error_type]
        self.retry = retry


class _ScriptError(ValueError):
    """The script cannot answer this request (a test's mistake, not an API behaviour)."""


@dataclass
class _Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    base: str  # scheme://host[:port] the client addressed, for building URLs in bodies
    request_id: str
    args: dict[str, str]
    body: Any


def _now() -> datetime:
    return datetime.now(UTC)


def _format_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _dumps(value: Any) -> str:
    # Compact and key-sorted so that equal content always hashes and counts the same.
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else _dumps(value)
    return math.ceil(len(text) / 4)


def _seconds(value: float) -> str:
    # Real servers send whole seconds; the SDK also accepts fractions, which keep tests fast.
    return str(int(value)) if value == int(value) else f"{value:g}"


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Lets a quickly restarted demo rebind the same port.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], standin: AnthropicStandIn) -> None:
        super().__init__(address, _Handler)
        self.standin = standin


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps the SDK's pooled connection alive across requests and retries.
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; with Nagle on, the client's delayed ACK
    # stalls every response by ~40 ms.
    disable_nagle_algorithm = True
    server_version = "AnthropicStandIn/1.0"

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        # Access logs would drown test output; `AnthropicStandIn.requests` is the log.
        pass

    def _handle(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        reply = server.standin._dispatch(self.command, self.path, raw, self.headers)
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            # A client that gave up (its timeout, or the test ending) has already gone away.
            self.close_connection = True


class AnthropicStandIn:
    """Answers ``/v1/messages`` and message batches from a script of `Reply` objects."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, api_key: str | None = "test-key"
    ) -> None:
        self._api_key = api_key
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._script: collections.deque[Reply] = collections.deque()
        self._cached_prefixes: set[str] = set()
        self._counters: dict[str, int] = collections.defaultdict(int)
        self.default_reply: Reply | None = None
        # The real API caches nothing shorter than 1024-4096 tokens depending on the model;
        # zero lets a test's short prompt exercise caching. Raise it to test the threshold.
        self.min_cache_tokens = 0
        self.requests: list[RecordedRequest] = []
        self.batches: dict[str, BatchState] = {}
        self._broken_results: dict[str, int] = {}
        batch = r"/v1/messages/batches/(?P<batch_id>[^/]+)"
        self._route_table: list[tuple[str, re.Pattern[str], Callable[[_Call], _Response]]] = [
            (method, re.compile(pattern), handler)
            for method, pattern, handler in (
                ("POST", r"/v1/messages", self._create_message),
                ("POST", r"/v1/messages/batches", self._create_batch),
                ("GET", batch, self._get_batch),
                ("GET", batch + r"/results", self._batch_results),
            )
        ]
        # Binding here rather than in start() makes `url` usable as soon as the object exists.
        self._server = _Server((host, port), self)
        bound_host, bound_port = self._server.server_address[:2]
        advertised = str(bound_host) if bound_host not in ("0.0.0.0", "") else "127.0.0.1"
        self._url = f"http://{advertised}:{bound_port}"

    @property
    def url(self) -> str:
        return self._url

    def start(self) -> AnthropicStandIn:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                # The default half-second poll would make every stop() (test teardown) slow.
                kwargs={"poll_interval": 0.05},
                name="anthropic-standin",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> AnthropicStandIn:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ scripting and inspection

    def script(self, *replies: Reply) -> None:
        """Queue answers for the next requests to /v1/messages (and batch entries), in order."""
        with self._lock:
            self._script.extend(replies)

    def messages_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(
                [r.json for r in self.requests if r.method == "POST" and r.path == "/v1/messages"]
            )

    def break_results(self, batch_id: str, after: int | None) -> None:
        """Serve a batch's results cut off after `after` lines (None: whole again)."""
        with self._lock:
            if after is None:
                self._broken_results.pop(batch_id, None)
            else:
                self._broken_results[batch_id] = after

    def finish_batch(self, batch_id: str) -> None:
        """End a batch now, answering its requests in order from the script or default reply."""
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                raise KeyError(f"no message batch {batch_id!r} in the stand-in")
            if batch.ended_at is not None:
                raise ValueError(f"message batch {batch_id} has already ended")
            results: list[bytes] = []
            succeeded = errored = 0
            for entry in batch.requests:
                line, ok = self._batch_result(entry)
                results.append(line)
                succeeded += ok
                errored += not ok
            # Only now, so that a script mistake above leaves the batch in progress (though the
            # replies it took are gone, as they would be for the same mistake over HTTP).
            batch.results = results
            batch.succeeded, batch.errored = succeeded, errored
            batch.ended_at = _now()

    # ----------------------------------------------------------------------- request handling

    def _dispatch(
        self, method: str, target: str, raw: bytes, headers: Message[str, str]
    ) -> _Response:
        path = urlsplit(target).path
        host = headers.get("Host")
        # URLs in bodies are built from the Host the client used, so a worker in another
        # container that reaches us by a different name gets a results_url it can follow.
        base = f"http://{host}" if host else self._url
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        with self._lock:
            request_id = self._new_id("req")
            self.requests.append(
                RecordedRequest(
                    method=method,
                    path=path,
                    headers={name.lower(): value for name, value in headers.items()},
                    json=body,
                )
            )
            try:
                if not self._authorised(headers):
                    raise _ApiError(401, "invalid x-api-key")
                if bad_json:
                    raise _ApiError(400, "The request body is not valid JSON.")
                reply = self._route(method, path, _Call(base, request_id, {}, body))
            except _ApiError as error:
                reply = self._error_response(error, request_id)
            except _ScriptError as error:
                # Retrying cannot fix a script, and would only hide the message behind a delay.
                reply = self._error_response(_ApiError(500, str(error), retry=False), request_id)
            except Exception as error:
                # A malformed request must still get an answer; a dropped connection would look
                # like a network fault and send the SDK's retries astray.
                traceback.print_exc()
                reply = self._error_response(
                    _ApiError(500, f"stand-in error: {error!r}", retry=False), request_id
                )
        reply.headers.setdefault("content-type", JSON_TYPE)
        reply.headers["request-id"] = request_id
        return reply

    def _authorised(self, headers: Message[str, str]) -> bool:
        if self._api_key is None:
            return True
        # The API takes the key as `x-api-key`; SDK 2.x sends `api_key=` as a bearer token.
        return headers.get("x-api-key") == self._api_key or (
            headers.get("Authorization") == f"Bearer {self._api_key}"
        )

    def _route(self, method: str, path: str, call: _Call) -> _Response:
        for route_method, pattern, handler in self._route_table:
            match = pattern.fullmatch(path)
            if match and route_method == method:
                return handler(_Call(call.base, call.request_id, match.groupdict(), call.body))
        raise _ApiError(404, f"Not found: {method} {path}")

    def _error_response(self, error: _ApiError, request_id: str) -> _Response:
        headers: dict[str, str] = {}
        if not error.retry:
            headers["x-should-retry"] = "false"
        return _Response(
            error.status,
            json.dumps(_error_body(error.error_type, error.message, request_id)).encode(),
            headers,
        )

    def _json(self, status: int, body: Any) -> _Response:
        return _Response(status, json.dumps(body).encode(), {"content-type": JSON_TYPE})

    # ------------------------------------------------------------------------------ routes

    def _create_message(self, call: _Call) -> _Response:
        params = self._validated_params(call.body, "")
        if params.get("stream"):
            raise _ApiError(400, "stand-in: streaming is not supported")
        reply = self._next_reply()
        if reply is None:
            raise _ApiError(500, NOTHING_SCRIPTED, retry=False)
        if reply.kind == "error":
            error = _ApiError(reply.status, reply.text or None)
            response = self._error_response(error, call.request_id)
            if reply.retry_after is not None:
                response.headers["retry-after"] = _seconds(reply.retry_after)
            return response
        if reply.kind == "raw":
            return _Response(reply.status, reply.raw_body, {"content-type": JSON_TYPE})
        return self._json(200, self._render_message(reply, params, service_tier="standard"))

    def _create_batch(self, call: _Call) -> _Response:
        requests = call.body.get("requests") if isinstance(call.body, dict) else None
        if not isinstance(requests, list) or not requests:
            raise _ApiError(400, "requests: a non-empty list is required")
        seen: set[str] = set()
        for index, entry in enumerate(requests):
            where = f"requests.{index}"
            if not isinstance(entry, dict):
                raise _ApiError(400, f"{where}: must be an object")
            custom_id = entry.get("custom_id")
            if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
                raise _ApiError(400, f"{where}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$")
            if custom_id in seen:
                raise _ApiError(400, f"{where}.custom_id: duplicate custom_id {custom_id!r}")
            seen.add(custom_id)
            params = self._validated_params(entry.get("params"), f"{where}.params.")
            if params.get("stream"):
                raise _ApiError(400, f"{where}.params.stream: not allowed in a batch")
        now = _now()
        batch = BatchState(
            id=self._new_id("msgbatch"),
            requests=copy.deepcopy(requests),
            created_at=now,
            expires_at=now + BATCH_LIFETIME,
        )
        self.batches[batch.id] = batch
        return self._json(200, self._render_batch(call.base, batch))

    def _get_batch(self, call: _Call) -> _Response:
        return self._json(200, self._render_batch(call.base, self._batch(call.args["batch_id"])))

    def _batch_results(self, call: _Call) -> _Response:
        batch = self._batch(call.args["batch_id"])
        if batch.ended_at is None:
            raise _ApiError(404, f"Message batch {batch.id} has not ended; it has no results yet")
        lines = batch.results
        if batch.id in self._broken_results:
            # The download breaks off after some results: the client sees a cut JSON line.
            lines = [*lines[: self._broken_results[batch.id]], b'{"custom_id": "cut']
        body = b"".join(line + b"\n" for line in lines)
        return _Response(200, body, {"content-type": JSONL_TYPE})

    # --------------------------------------------------------------------------- helpers

    def _new_id(self, prefix: str) -> str:
        self._counters[prefix] += 1
        return f"{prefix}_{self._counters[prefix]}"

    def _next_reply(self) -> Reply | None:
        return self._script.popleft() if self._script else self.default_reply

    def _batch(self, batch_id: str) -> BatchState:
        batch = self.batches.get(batch_id)
        if batch is None:
            raise _ApiError(404, f"Message batch {batch_id} not found")
        return batch

    def _validated_params(self, params: Any, where: str) -> dict[str, Any]:
        # The checks the API makes before a model sees anything: a request it would refuse
        # must not consume a scripted answer.
        if not isinstance(params, dict):
            raise _ApiError(400, f"{where or 'body'}: must be an object")
        if not isinstance(params.get("model"), str) or not params["model"]:
            raise _ApiError(400, f"{where}model: Field required")
        max_tokens = params.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _ApiError(400, f"{where}max_tokens: Field required")
        messages = params.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _ApiError(400, f"{where}messages: at least one message is required")
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
                raise _ApiError(400, f"{where}messages.{index}.role: must be user or assistant")
            if not isinstance(message.get("content"), str | list):
                raise _ApiError(400, f"{where}messages.{index}.content: Field required")
        tools = params.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise _ApiError(400, f"{where}tools: must be a list")
        system = params.get("system")
        if system is not None and not isinstance(system, str | list):
            raise _ApiError(400, f"{where}system: must be a string or a list of blocks")
        breakpoints = len(self._prompt_parts(params)[1])
        if breakpoints > MAX_CACHE_BREAKPOINTS:
            raise _ApiError(
                400,
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
                f"provided. Found {breakpoints}.",
            )
        return params

    def _batch_result(self, entry: dict[str, Any]) -> tuple[bytes, bool]:
        custom_id = entry["custom_id"]
        reply = self._next_reply()
        result: dict[str, Any]
        if reply is None or reply.kind == "error":
            error = (
                _ApiError(500, NOTHING_SCRIPTED)
                if reply is None
                else _ApiError(reply.status, reply.text or None)
            )
            result = {
                "type": "errored",
                "error": _error_body(error.error_type, error.message, self._new_id("req")),
            }
        elif reply.kind == "raw":
            # Stands in for a corrupt line in the results file.
            return reply.raw_body.rstrip(b"\r\n"), True
        else:
            message = self._render_message(reply, entry["params"], service_tier="batch")
            result = {"type": "succeeded", "message": message}
        line = json.dumps({"custom_id": custom_id, "result": result}).encode()
        return line, result["type"] == "succeeded"

    def _tool_name(self, params: dict[str, Any]) -> str:
        choice = params.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool" and choice.get("name"):
            return str(choice["name"])
        tools = params.get("tools") or []
        if tools and isinstance(tools[0], dict) and tools[0].get("name"):
            return str(tools[0]["name"])
        raise _ScriptError(
            'stand-in: a Reply(kind="tool") was scripted but the request has no tools'
        )

    def _render_message(
        self, reply: Reply, params: dict[str, Any], *, service_tier: str
    ) -> dict[str, Any]:
        content: list[dict[str, Any]]
        if reply.kind == "tool":
            content = [
                {
                    "type": "tool_use",
                    "id": self._new_id("toolu"),
                    "name": self._tool_name(params),
                    "input": copy.deepcopy(reply.tool_input),
                }
            ]
            stop_reason = "tool_use"
        else:
            content = [{"type": "text", "text": reply.text, "citations": None}]
            stop_reason = "end_turn"
        usage = self._usage(params, content, service_tier)
        if reply.usage:
            usage.update(reply.usage)
        return {
            "id": self._new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": params["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "stop_details": None,
            "container": None,
            "usage": usage,
        }

    def _render_batch(self, base: str, batch: BatchState) -> dict[str, Any]:
        ended = batch.ended_at is not None
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.processing_status,
            "request_counts": {
                "processing": 0 if ended else len(batch.requests),
                "succeeded": batch.succeeded,
                "errored": batch.errored,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": _format_time(batch.created_at),
            "expires_at": _format_time(batch.expires_at),
            "ended_at": _format_time(batch.ended_at),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

    # ---------------------------------------------------------------------- usage and caching

    def _prompt_parts(
        self, params: dict[str, Any]
    ) -> tuple[list[Any], list[tuple[int, dict[str, Any]]]]:
        """The prompt as cacheable blocks in the API's prefix order, and its cache breakpoints.

        Breakpoints are (index, cache_control) pairs; markers are left out of the blocks so that
        moving a breakpoint does not change what the content hashes to.
        """
        parts: list[Any] = []
        marks: list[tuple[int, dict[str, Any]]] = []

        def add(block: Any, role: str | None = None) -> None:
            if isinstance(block, dict):
                control = block.get("cache_control")
                if isinstance(control, dict):
                    marks.append((len(parts), control))
                block = {k: v for k, v in block.items() if k != "cache_control"}
            parts.append(block if role is None else {"role": role, "block": block})

        # Tools, then system, then messages: the order in which the API builds its cache key.
        for tool in params.get("tools") or []:
            add(tool)
        system = params.get("system")
        for block in (
            [{"type": "text", "text": system}] if isinstance(system, str) else system or []
        ):
            add(block)
        for message in params.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for block in blocks or []:
                add(block, str(message.get("role")))
        # Top-level cache_control asks the API to put the breakpoint on the last block.
        control = params.get("cache_control")
        if isinstance(control, dict) and parts and not (marks and marks[-1][0] == len(parts) - 1):
            marks.append((len(parts) - 1, control))
        return parts, marks

    def _usage(
        self, params: dict[str, Any], content: list[dict[str, Any]], service_tier: str
    ) -> dict[str, Any]:
        parts, marks = self._prompt_parts(params)
        tokens = [_estimate_tokens(part) for part in parts]
        # Running hashes: keys[i] names the prefix parts[: i + 1] for this model.
        running = hashlib.sha256(str(params["model"]).encode())
        keys: list[str] = []
        for part in parts:
            running.update(_dumps(part).encode() + b"\0")
            keys.append(running.hexdigest())
        ends = sorted({index + 1 for index, _ in marks})  # prefix lengths, in parts
        # A hit is the longest marked prefix already cached; the rest up to the last
        # breakpoint is written to the cache; what follows it is ordinary input.
        read_end = next(
            (end for end in reversed(ends) if keys[end - 1] in self._cached_prefixes), 0
        )
        created = 0
        for end in ends:
            if end > read_end and sum(tokens[:end]) >= self.min_cache_tokens:
                self._cached_prefixes.add(keys[end - 1])
                created = sum(tokens[read_end:end])
        cache_read = sum(tokens[:read_end])
        one_hour = bool(marks) and marks[-1][1].get("ttl") == "1h"
        return {
            "input_tokens": sum(tokens) - cache_read - created,
            "output_tokens": max(_estimate_tokens(content), 1),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 0 if one_hour else created,
                "ephemeral_1h_input_tokens": created if one_hour else 0,
            },
            "service_tier": service_tier,
            "server_tool_use": None,
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m triage.standins.anthropic",
        description="Serve a local stand-in for Anthropic's Messages API.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--api-key", default=None, help="reject requests without this key")
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument("--tool-input", help="JSON object every request's tool call returns")
    answer.add_argument("--text", help="text every request answers with")
    args = parser.parse_args(argv)

    standin = AnthropicStandIn(host=args.host, port=args.port, api_key=args.api_key)
    if args.tool_input is not None:
        standin.default_reply = Reply("tool", tool_input=json.loads(args.tool_input))
    elif args.text is not None:
        standin.default_reply = Reply("text", text=args.text)
    standin.start()
    print(f"Anthropic stand-in at {standin.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        standin.stop()


if __name__ == "__main__":
    main()
