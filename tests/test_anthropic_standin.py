"""The Anthropic stand-in, exercised through the real ``anthropic`` SDK over real HTTP.

These tests pin both sides of the contract the console relies on: that the stand-in answers the
way the Messages API does, and how anthropic 2.12 turns those answers into objects and
exceptions (its retries, its honouring of retry-after, what it raises on a broken body).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import anthropic
import pytest
from anthropic.types import Message, TextBlock, ToolUseBlock
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse

from triage.standins.anthropic import AnthropicStandIn, Reply

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY = "test-key"
MODEL = "claude-test-1"
TOOL = "propose_triage"
SYSTEM: list[dict[str, Any]] = [
    {"type": "text", "text": "You triage GitHub issues. " * 20},
    {
        "type": "text",
        "text": "# Rubric\n" + "Label it well. " * 200,
        "cache_control": {"type": "ephemeral"},
    },
]
TOOLS: list[dict[str, Any]] = [
    {"name": "other_tool", "description": "not this one", "input_schema": {"type": "object"}},
    {"name": TOOL, "description": "Propose a triage.", "input_schema": {"type": "object"}},
]
PROPOSAL = {"add_labels": ["oncall: pt2"], "score": 0.9, "citations": []}


def params(**overrides: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "system": SYSTEM,
        "tools": TOOLS,
        "tool_choice": {"type": "tool", "name": TOOL},
        "messages": [{"role": "user", "content": "Triage issue #1: the compiler crashes."}],
        **overrides,
    }


def client(api: AnthropicStandIn, **kwargs: Any) -> anthropic.Anthropic:
    options: dict[str, Any] = {
        "api_key": KEY,
        "base_url": api.url,
        "max_retries": 0,
        # Strict validation checks every answer against the SDK's own types, so a shape the
        # lenient default would quietly accept still fails here.
        "_strict_response_validation": True,
        **kwargs,
    }
    return anthropic.Anthropic(**options)


def raw_post(api: AnthropicStandIn, path: str, body: bytes, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(api.url + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def api() -> Iterator[AnthropicStandIn]:
    with AnthropicStandIn(api_key=KEY) as server:
        yield server


# --------------------------------------------------------------------------- messages


def test_forced_tool_call_comes_back_as_a_tool_use_block(api: AnthropicStandIn) -> None:
    api.script(Reply("tool", tool_input=PROPOSAL))

    message = client(api).messages.create(**params())

    assert isinstance(message, Message)
    assert message.id.startswith("msg_")
    assert message.model == MODEL
    assert message.role == "assistant"
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert isinstance(block, ToolUseBlock)
    # tool_choice names the second tool: the stand-in must not just take the first.
    assert block.name == TOOL
    assert block.input == PROPOSAL
    assert block.id.startswith("toolu_")
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0


def test_unforced_tool_call_uses_the_first_tool(api: AnthropicStandIn) -> None:
    api.script(Reply("tool", tool_input={"x": 1}))

    message = client(api).messages.create(**params(tool_choice={"type": "auto"}))

    [block] = message.content
    assert isinstance(block, ToolUseBlock)
    assert block.name == "other_tool"


def test_text_reply_has_no_tool_call(api: AnthropicStandIn) -> None:
    api.script(Reply("text", text="I would rather not call a tool."))

    message = client(api).messages.create(**params())

    assert message.stop_reason == "end_turn"
    assert [type(b) for b in message.content] == [TextBlock]
    assert isinstance(message.content[0], TextBlock)
    assert message.content[0].text == "I would rather not call a tool."


def test_broken_json_raises_a_bare_json_decode_error(api: AnthropicStandIn) -> None:
    # The SDK does not wrap a body it cannot parse: json.JSONDecodeError (a ValueError, not an
    # anthropic.APIError) escapes messages.create, and it is not retried.
    api.script(Reply("raw", raw_body=b'{"id": "msg_1", "type": "mess'))

    with pytest.raises(json.JSONDecodeError):
        client(api, max_retries=2).messages.create(**params())
    assert len(api.messages_requests()) == 1


def test_wrong_shape_json_depends_on_strict_validation(api: AnthropicStandIn) -> None:
    wrong = b'{"id": 1, "content": "not a list"}'
    api.script(Reply("raw", raw_body=wrong), Reply("raw", raw_body=wrong))

    # By default the SDK constructs the model without validating: missing fields are None.
    lenient = client(api, _strict_response_validation=False).messages.create(**params())
    assert lenient.usage is None
    assert lenient.role is None
    with pytest.raises(anthropic.APIResponseValidationError):
        client(api).messages.create(**params())


def test_rate_limit_with_retry_after_is_retried(api: AnthropicStandIn) -> None:
    api.script(
        Reply("error", status=429, retry_after=0.1),
        Reply("tool", tool_input=PROPOSAL),
    )

    sdk = client(api, max_retries=2)  # built first: constructing a client takes ~0.1 s
    started = time.monotonic()
    message = sdk.messages.create(**params())
    elapsed = time.monotonic() - started

    assert isinstance(message.content[0], ToolUseBlock)
    first, second = (r for r in api.requests if r.path == "/v1/messages")
    assert second.headers["x-stainless-retry-count"] == "1"
    # The SDK slept what retry-after said rather than its own backoff (0.375 s or more).
    assert 0.1 <= elapsed < 0.35
    assert first.json == second.json


def test_overloaded_then_success(api: AnthropicStandIn) -> None:
    api.script(
        Reply("error", status=529, retry_after=0.05),
        Reply("text", text="back"),
    )

    message = client(api, max_retries=2).messages.create(**params())

    assert isinstance(message.content[0], TextBlock)
    assert len(api.messages_requests()) == 2


def test_server_errors_exhaust_the_retries(api: AnthropicStandIn) -> None:
    api.script(*[Reply("error", status=500, retry_after=0.01, text="boom")] * 3)
    api.default_reply = Reply("text", text="never reached")

    with pytest.raises(anthropic.InternalServerError) as raised:
        client(api, max_retries=2).messages.create(**params())

    error = raised.value
    assert error.status_code == 500
    assert error.type == "api_error"
    assert error.api_message == "boom"
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert isinstance(error.body, dict) and error.body["request_id"] == error.request_id
    assert len(api.messages_requests()) == 3  # the first try and two retries


def test_wrong_key_is_refused_without_retrying(api: AnthropicStandIn) -> None:
    api.script(Reply("tool", tool_input=PROPOSAL))

    with pytest.raises(anthropic.AuthenticationError) as raised:
        client(api, api_key="wrong", max_retries=2).messages.create(**params())

    assert raised.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        "request_id": raised.value.request_id,
    }
    assert len(api.requests) == 1
    # The refused request did not use up the scripted answer.
    assert isinstance(client(api).messages.create(**params()).content[0], ToolUseBlock)


def test_key_is_accepted_as_x_api_key_header_too(api: AnthropicStandIn) -> None:
    # anthropic 2.12 sends api_key as `Authorization: Bearer`; other clients use x-api-key.
    api.script(Reply("text", text="hi"))
    body = json.dumps(params()).encode()
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}

    status, answer = raw_post(api, "/v1/messages", body, {**headers, "x-api-key": KEY})
    assert (status, answer["content"]) == (200, [{"type": "text", "text": "hi", "citations": None}])
    status, answer = raw_post(api, "/v1/messages", body, {**headers, "x-api-key": "nope"})
    assert (status, answer["error"]["type"]) == (401, "authentication_error")


@pytest.mark.parametrize(
    ("status", "error_class", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_scripted_errors_map_to_sdk_exceptions(
    api: AnthropicStandIn, status: int, error_class: type[Exception], error_type: str
) -> None:
    api.script(Reply("error", status=status))

    with pytest.raises(error_class) as raised:
        client(api).messages.create(**params())

    assert isinstance(raised.value, anthropic.APIStatusError)
    assert raised.value.type == error_type


def test_nothing_scripted_fails_fast(api: AnthropicStandIn) -> None:
    with pytest.raises(anthropic.InternalServerError, match="nothing scripted"):
        client(api, max_retries=2).messages.create(**params())
    # x-should-retry: false stops the SDK from retrying a script that cannot change.
    assert len(api.messages_requests()) == 1

    api.default_reply = Reply("tool", tool_input={"n": 1})
    for _ in range(2):
        assert isinstance(client(api).messages.create(**params()).content[0], ToolUseBlock)


def test_tool_reply_to_a_request_without_tools_is_a_script_error(api: AnthropicStandIn) -> None:
    api.script(Reply("tool", tool_input={}))

    with pytest.raises(anthropic.InternalServerError, match="has no tools"):
        client(api).messages.create(**params(tools=[], tool_choice={"type": "auto"}))


def test_an_invalid_request_does_not_consume_the_script(api: AnthropicStandIn) -> None:
    api.script(Reply("text", text="kept"))
    headers = {"content-type": "application/json", "x-api-key": KEY}

    status, answer = raw_post(api, "/v1/messages", json.dumps({"model": MODEL}).encode(), headers)
    assert (status, answer["error"]["type"]) == (400, "invalid_request_error")
    status, answer = raw_post(api, "/v1/messages", b"{not json", headers)
    assert status == 400

    message = client(api).messages.create(**params())
    assert isinstance(message.content[0], TextBlock) and message.content[0].text == "kept"


def test_reply_rejects_a_malformed_script() -> None:
    with pytest.raises(ValueError, match="kind"):
        Reply("tool_use", tool_input={})
    with pytest.raises(ValueError, match="tool_input"):
        Reply("tool")
    with pytest.raises(ValueError, match="error status"):
        Reply("error")


def test_scripted_usage_overrides_the_estimate(api: AnthropicStandIn) -> None:
    api.script(Reply("text", text="x", usage={"output_tokens": 4096}))

    usage = client(api).messages.create(**params()).usage

    assert usage.output_tokens == 4096
    assert usage.input_tokens > 0


# ------------------------------------------------------------------------ prompt caching


def test_the_same_system_prefix_is_written_then_read_from_the_cache(api: AnthropicStandIn) -> None:
    api.default_reply = Reply("tool", tool_input=PROPOSAL)
    sdk = client(api)
    other_issue = [{"role": "user", "content": "Triage issue #2: a different, longer report."}]

    first = sdk.messages.create(**params()).usage
    second = sdk.messages.create(**params(messages=other_issue)).usage

    assert first.cache_creation_input_tokens and first.cache_creation_input_tokens > 0
    assert first.cache_read_input_tokens == 0
    assert second.cache_creation_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    # Only the uncached tail (the issue) is ordinary input; it differs between the two.
    assert 0 < first.input_tokens < second.input_tokens
    assert first.cache_creation is not None
    assert first.cache_creation.ephemeral_5m_input_tokens == first.cache_creation_input_tokens


def test_a_different_prefix_or_no_breakpoint_is_not_a_cache_hit(api: AnthropicStandIn) -> None:
    api.default_reply = Reply("tool", tool_input=PROPOSAL)
    sdk = client(api)
    sdk.messages.create(**params())
    changed = [SYSTEM[0], {**SYSTEM[1], "text": SYSTEM[1]["text"] + " Revised."}]
    unmarked = [{"type": "text", "text": block["text"]} for block in SYSTEM]

    revised = sdk.messages.create(**params(system=changed)).usage
    uncached = sdk.messages.create(**params(system=unmarked)).usage
    other_model = sdk.messages.create(**params(model="claude-other")).usage

    assert revised.cache_read_input_tokens == 0
    assert revised.cache_creation_input_tokens and revised.cache_creation_input_tokens > 0
    assert (uncached.cache_read_input_tokens, uncached.cache_creation_input_tokens) == (0, 0)
    assert other_model.cache_read_input_tokens == 0


def test_prefixes_below_the_minimum_are_not_cached(api: AnthropicStandIn) -> None:
    api.default_reply = Reply("text", text="ok")
    api.min_cache_tokens = 1_000_000
    sdk = client(api)

    for _ in range(2):
        usage = sdk.messages.create(**params()).usage
        assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (0, 0)


# --------------------------------------------------------------------------- batches


def test_batch_runs_from_creation_to_results(api: AnthropicStandIn) -> None:
    sdk = client(api)
    requests: Any = [
        {"custom_id": "issue-1", "params": params()},
        {"custom_id": "issue-2", "params": params()},
    ]

    created = sdk.messages.batches.create(requests=requests)

    assert isinstance(created, MessageBatch)
    assert created.id.startswith("msgbatch_")
    assert created.processing_status == "in_progress"
    assert created.request_counts.processing == 2
    assert created.results_url is None and created.ended_at is None
    assert created.expires_at > created.created_at
    assert sdk.messages.batches.retrieve(created.id).processing_status == "in_progress"
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        list(sdk.messages.batches.results(created.id))

    api.script(Reply("tool", tool_input=PROPOSAL), Reply("error", status=529))
    api.finish_batch(created.id)

    ended = sdk.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended"
    assert ended.ended_at is not None
    counts = ended.request_counts
    assert (counts.processing, counts.succeeded, counts.errored) == (0, 1, 1)
    assert ended.results_url == f"{api.url}/v1/messages/batches/{created.id}/results"

    results = list(sdk.messages.batches.results(created.id))
    assert [r.custom_id for r in results] == ["issue-1", "issue-2"]
    # The SDK builds result lines without validating them; validating here checks the shape.
    for entry in results:
        MessageBatchIndividualResponse.model_validate(entry.model_dump())
    succeeded, errored = (r.result for r in results)
    assert succeeded.type == "succeeded"
    [block] = succeeded.message.content
    assert isinstance(block, ToolUseBlock)
    assert (block.name, block.input) == (TOOL, PROPOSAL)
    assert succeeded.message.usage.service_tier == "batch"
    assert errored.type == "errored"
    assert errored.error.error.type == "overloaded_error"

    results_request = api.requests[-1]
    assert results_request.path == f"/v1/messages/batches/{created.id}/results"
    assert results_request.headers["accept"] == "application/binary"
    # Batch entries are not /v1/messages calls.
    assert api.messages_requests() == []
    assert api.batches[created.id].requests == requests


def test_batch_errors(api: AnthropicStandIn) -> None:
    sdk = client(api)
    twice: Any = {"custom_id": "same", "params": params()}
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.batches.retrieve("msgbatch_missing")
    with pytest.raises(anthropic.BadRequestError, match="duplicate"):
        sdk.messages.batches.create(requests=[twice, twice])
    with pytest.raises(KeyError):
        api.finish_batch("msgbatch_missing")
    one: Any = {"custom_id": "a", "params": params()}
    batch = sdk.messages.batches.create(requests=[one])
    api.finish_batch(batch.id)  # nothing scripted: the entry errors with api_error
    with pytest.raises(ValueError, match="already ended"):
        api.finish_batch(batch.id)
    [entry] = list(sdk.messages.batches.results(batch.id))
    assert entry.result.type == "errored"
    assert entry.result.error.error.type == "api_error"


# ------------------------------------------------------------------------------ recording


def test_recorded_request_keeps_the_body_and_headers_as_sent(api: AnthropicStandIn) -> None:
    api.script(Reply("tool", tool_input=PROPOSAL))

    client(api).messages.create(**params())

    [recorded] = api.requests
    assert (recorded.method, recorded.path) == ("POST", "/v1/messages")
    assert recorded.json["system"] == SYSTEM
    assert recorded.json["tools"] == TOOLS
    assert recorded.json["tool_choice"] == {"type": "tool", "name": TOOL}
    assert recorded.json["model"] == MODEL
    assert api.messages_requests() == [recorded.json]
    assert recorded.headers["authorization"] == f"Bearer {KEY}"
    assert recorded.headers["content-type"] == "application/json"
    assert "anthropic-version" in recorded.headers
    assert recorded.headers["user-agent"].startswith("Anthropic/Python")
