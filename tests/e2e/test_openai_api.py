"""End-to-end tests of Warden's OpenAI-compatible API, through the official `openai` client
and raw `httpx` calls.

The server must already be running: `WARDEN_URL` is its API base URL, for example
`http://127.0.0.1:8080/v1`. The tests wait for it to come up and find the loaded chat and
embedding models through `/v1/models`. The models run on a small CPU, so every generation
asks for few tokens unless the test needs more.

Optional settings: `WARDEN_API_KEY` (sent as the bearer token), `WARDEN_STARTUP_TIMEOUT`
(seconds to wait for the server, default 180), `WARDEN_MAX_BODY_BYTES` (the server's body
limit, default 4 MiB).
"""

import json
import math
import os
import statistics
import threading
import time

import httpx
import jsonschema
import openai
import pytest

BASE_URL = os.environ.get("WARDEN_URL", "http://127.0.0.1:8080/v1").rstrip("/")
ROOT_URL = BASE_URL[: -len("/v1")] if BASE_URL.endswith("/v1") else BASE_URL
API_KEY = os.environ.get("WARDEN_API_KEY", "unused")
STARTUP_TIMEOUT_S = float(os.environ.get("WARDEN_STARTUP_TIMEOUT", "180"))
MAX_BODY_BYTES = int(os.environ.get("WARDEN_MAX_BODY_BYTES", str(4 << 20)))
REQUEST_TIMEOUT_S = 180.0
EMBEDDING_DIMENSIONS = 384
HEALTHZ_BUDGET_S = 0.100

ERROR_FIELDS = {"message", "type", "code", "param"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}

TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris"}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}

ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    },
    "required": ["color", "count", "name", "tags"],
    "additionalProperties": False,
}


def _headers():
    return {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="session")
def http():
    """An HTTP client, once the server answers `/healthz`."""
    with httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=_headers()) as client:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                response = client.get(f"{ROOT_URL}/healthz", timeout=5)
                if response.status_code == 200:
                    break
                last_error = f"HTTP {response.status_code}: {response.text}"
            except httpx.HTTPError as err:
                last_error = repr(err)
            if time.monotonic() > deadline:
                pytest.fail(f"no server at {ROOT_URL} after {STARTUP_TIMEOUT_S}s: {last_error}")
            time.sleep(0.25)
        yield client


@pytest.fixture(scope="session")
def models(http):
    """Waits for the server, then returns {"chat": id, "embedding": id}."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last_error = None
    while time.monotonic() < deadline:
        try:
            response = http.get(f"{BASE_URL}/models", timeout=5)
            if response.status_code == 200:
                found = {}
                for model in response.json()["data"]:
                    found.setdefault(model.get("kind"), model["id"])
                if "chat" in found and "embedding" in found:
                    return found
                last_error = f"models loaded so far: {response.text}"
            else:
                last_error = f"HTTP {response.status_code}: {response.text}"
        except httpx.HTTPError as err:
            last_error = repr(err)
        time.sleep(0.5)
    pytest.fail(f"no chat and embedding model at {BASE_URL} after {STARTUP_TIMEOUT_S}s: {last_error}")


@pytest.fixture(scope="session")
def client(models):
    return openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, timeout=REQUEST_TIMEOUT_S, max_retries=0)


@pytest.fixture(scope="session")
def chat_model(models):
    return models["chat"]


@pytest.fixture(scope="session")
def embedding_model(models):
    return models["embedding"]


def assert_error_shape(response, status, code=None):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    assert ERROR_FIELDS <= set(body["error"]), body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


def user(text):
    return [{"role": "user", "content": text}]


# --- health and models -------------------------------------------------------------------


def test_healthz_lists_models(http, models):
    response = http.get(f"{ROOT_URL}/healthz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok"
    assert models["chat"] in body["models"] and models["embedding"] in body["models"]
    assert isinstance(body["failed_models"], list)
    for failure in body["failed_models"]:
        assert {"id", "path", "error"} <= set(failure), failure


def test_models_list_and_retrieve(client, chat_model, embedding_model):
    ids = [model.id for model in client.models.list()]
    assert chat_model in ids and embedding_model in ids
    model = client.models.retrieve(chat_model)
    assert model.id == chat_model and model.object == "model" and model.owned_by == "warden"


def test_unknown_model_retrieve_is_404(http, models):
    assert_error_shape(http.get(f"{BASE_URL}/models/no-such-model"), 404, "model_not_found")


# --- chat completions --------------------------------------------------------------------


def test_chat_completion(client, chat_model):
    completion = client.chat.completions.create(
        model=chat_model,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello in one short sentence."},
        ],
        max_tokens=32,
        temperature=0,
    )
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == chat_model
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert not choice.message.tool_calls
    usage = completion.usage
    assert usage.prompt_tokens > 0
    assert 1 <= usage.completion_tokens <= 32
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    if choice.finish_reason == "length":
        assert usage.completion_tokens == 32


def test_chat_completion_with_content_parts_and_default_model(client):
    completion = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}],
        max_completion_tokens=8,
    )
    assert completion.choices[0].message.content is not None
    assert completion.usage.completion_tokens <= 8


def test_chat_stream(client, chat_model):
    stream = client.chat.completions.create(
        model=chat_model,
        messages=user("Count from one to five in words."),
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks, "no chunks"
    ids = {chunk.id for chunk in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"

    choice_chunks = [chunk for chunk in chunks if chunk.choices]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in choice_chunks)
    assert text.strip(), "streamed text is empty"
    finishes = [chunk.choices[0].finish_reason for chunk in choice_chunks if chunk.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"]), finishes
    assert choice_chunks[-1].choices[0].finish_reason == finishes[0], "finish_reason must come last"

    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens > 0
    assert 1 <= usage_chunk.usage.completion_tokens <= 24
    assert usage_chunk.usage.total_tokens == usage_chunk.usage.prompt_tokens + usage_chunk.usage.completion_tokens


def test_chat_stream_raw_frames(http, chat_model):
    """Every frame is `data: <json>` and the stream ends with `data: [DONE]`."""
    body = {"model": chat_model, "messages": user("Hi!"), "max_tokens": 8, "stream": True}
    with http.stream("POST", f"{BASE_URL}/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode("utf-8")
    assert raw.endswith("\n\n"), raw[-80:]
    frames = raw.split("\n\n")[:-1]
    assert all(frame.startswith("data: ") for frame in frames), frames
    assert frames[-1] == "data: [DONE]"
    for frame in frames[:-1]:
        chunk = json.loads(frame[len("data: "):])
        assert chunk["object"] == "chat.completion.chunk"
    assert not any(json.loads(frame[6:]).get("usage") for frame in frames[:-1]), "usage only when asked"


def test_fixed_seed_is_reproducible(client, chat_model):
    def sample():
        completion = client.chat.completions.create(
            model=chat_model,
            messages=user("Write one sentence about the sea."),
            max_tokens=24,
            temperature=0.8,
            seed=1234,
        )
        return completion.choices[0].message.content

    first, second = sample(), sample()
    assert first, "empty output"
    assert first == second


def test_json_schema_output_validates(client, chat_model):
    """Constrained decoding: every output parses and validates, eight samples over."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "item", "schema": ITEM_SCHEMA, "strict": True},
    }
    for attempt in range(8):
        completion = client.chat.completions.create(
            model=chat_model,
            messages=user("Describe one item for a shop catalogue as JSON with color, count, name and tags."),
            response_format=response_format,
            max_tokens=160,
            temperature=0.8,
            seed=attempt,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", f"attempt {attempt}: {choice.finish_reason}: {choice.message.content!r}"
        value = json.loads(choice.message.content)
        jsonschema.validate(value, ITEM_SCHEMA)


def test_json_object_output_parses(client, chat_model):
    completion = client.chat.completions.create(
        model=chat_model,
        messages=user("Give a JSON object with a key 'city' naming a French city."),
        response_format={"type": "json_object"},
        max_tokens=48,
        temperature=0,
    )
    choice = completion.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content), dict)


def _tool_parameters(name):
    return next(tool["function"]["parameters"] for tool in (WEATHER_TOOL, TIME_TOOL) if tool["function"]["name"] == name)


def _check_tool_calls(choice, allowed_names):
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls, "no tool calls"
    for call in calls:
        assert call.type == "function"
        assert call.id
        assert call.function.name in allowed_names, call.function.name
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, _tool_parameters(call.function.name))
    return calls


def test_tool_choice_required(client, chat_model):
    completion = client.chat.completions.create(
        model=chat_model,
        messages=user("What is the weather like in Paris right now?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        max_tokens=64,
        temperature=0,
    )
    _check_tool_calls(completion.choices[0], {"get_weather", "get_time"})
    assert completion.usage.completion_tokens > 0


def test_tool_choice_named(client, chat_model):
    completion = client.chat.completions.create(
        model=chat_model,
        messages=user("What time is it in Tokyo?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=64,
        temperature=0,
    )
    calls = _check_tool_calls(completion.choices[0], {"get_time"})
    assert all(call.function.name == "get_time" for call in calls)


def test_tool_call_streamed(client, chat_model):
    stream = client.chat.completions.create(
        model=chat_model,
        messages=user("Weather in Oslo?"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        temperature=0,
        stream=True,
    )
    calls = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        assert not delta.content, f"tool-call text leaked as content: {delta.content!r}"
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls and all(call["name"] == "get_weather" for call in calls.values())
    for call in calls.values():
        jsonschema.validate(json.loads(call["arguments"]), _tool_parameters("get_weather"))


def test_tool_result_conversation(client, chat_model):
    """A full tool round trip is accepted: assistant tool call, then the tool's answer."""
    completion = client.chat.completions.create(
        model=chat_model,
        messages=[
            {"role": "user", "content": "Weather in Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 21, "sky": "clear"}'},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_tokens=32,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)


def _weather_history(first_city, next_city):
    """A conversation in which the assistant already answered one weather question with a
    tool call: the 135M model then tends to answer the next one the same way."""
    return [
        {"role": "user", "content": f"What is the weather in {first_city}?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": first_city})}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18, "sky": "cloudy"}'},
        {"role": "assistant", "content": f"It is 18°C and cloudy in {first_city}."},
        {"role": "user", "content": f"What is the weather in {next_city}?"},
    ]


def _check_text_or_tool_calls(choice, allowed_names):
    """An "auto" answer: text, or tool calls whose arguments validate."""
    if choice.message.tool_calls:
        _check_tool_calls(choice, allowed_names)
        return "calls"
    assert choice.finish_reason in ("stop", "length"), choice
    assert isinstance(choice.message.content, str) and choice.message.content, choice
    assert not choice.message.content.startswith("<tool_call>"), choice.message.content
    return "text"


def test_tools_without_tool_choice_answer_text_or_valid_calls(client, chat_model):
    """No `tool_choice` means OpenAI's "auto": a 200 with text or valid calls, never an error."""
    for prompt in ("Hello! How are you?", "What is the weather like in Paris right now?"):
        completion = client.chat.completions.create(
            model=chat_model,
            messages=user(prompt),
            tools=[WEATHER_TOOL, TIME_TOOL],
            max_tokens=48,
            temperature=0,
        )
        _check_text_or_tool_calls(completion.choices[0], {"get_weather", "get_time"})
        assert 1 <= completion.usage.completion_tokens <= 48


def test_auto_tool_choice_answers_with_a_call(client, chat_model):
    kinds = []
    for first_city, next_city in (("Paris", "Berlin"), ("Rome", "Oslo"), ("London", "Madrid")):
        completion = client.chat.completions.create(
            model=chat_model,
            messages=_weather_history(first_city, next_city),
            tools=[WEATHER_TOOL, TIME_TOOL],
            tool_choice="auto",
            max_tokens=48,
            temperature=0,
        )
        kinds.append(_check_text_or_tool_calls(completion.choices[0], {"get_weather", "get_time"}))
    assert "calls" in kinds, f"the model never called a tool: {kinds}"


def test_several_tools_and_several_calls(client, chat_model):
    """With two tools and a question needing both, every call made is valid, and more than
    one call may come back in one answer."""
    completion = client.chat.completions.create(
        model=chat_model,
        messages=user("What's the weather in Paris and the time in Tokyo?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        max_tokens=96,
        temperature=0,
    )
    calls = _check_tool_calls(completion.choices[0], {"get_weather", "get_time"})
    assert len({call.id for call in calls}) == len(calls), "call ids must differ"
    assert len({(c.function.name, c.function.arguments) for c in calls}) == len(calls), "repeated call"
    names = {call.function.name for call in calls}
    assert names == {"get_weather", "get_time"}, [(c.function.name, c.function.arguments) for c in calls]


def test_parallel_tool_calls_false_allows_one_call(client, chat_model):
    completion = client.chat.completions.create(
        model=chat_model,
        messages=user("What's the weather in Paris and the time in Tokyo?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=96,
        temperature=0,
    )
    assert len(_check_tool_calls(completion.choices[0], {"get_weather", "get_time"})) == 1


def _collect_stream(stream):
    """Content text, tool calls by index, and the finish reason of a streamed answer."""
    text, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = call.id or entry["id"]
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return text, calls, finish


def test_tools_streamed_in_auto_mode(client, chat_model):
    """Streaming with tools and no tool_choice: either text deltas, or tool calls with one
    index each (0, 1, …) and no text."""
    seen = set()
    for messages in (user("Hello! How are you?"), _weather_history("Paris", "Berlin")):
        stream = client.chat.completions.create(
            model=chat_model,
            messages=messages,
            tools=[WEATHER_TOOL, TIME_TOOL],
            max_tokens=48,
            temperature=0,
            stream=True,
        )
        text, calls, finish = _collect_stream(stream)
        if calls:
            seen.add("calls")
            assert finish == "tool_calls" and text == "", (finish, text)
            assert sorted(calls) == list(range(len(calls))), calls
            for call in calls.values():
                assert call["id"] and call["name"] in {"get_weather", "get_time"}, call
                jsonschema.validate(json.loads(call["arguments"]), _tool_parameters(call["name"]))
        else:
            seen.add("text")
            assert finish in ("stop", "length") and text.strip(), (finish, text)
            assert not text.startswith("<tool_call>"), text
    assert seen == {"text", "calls"}, f"expected one text answer and one call: {seen}"


def test_streamed_required_calls_each_carry_an_index(client, chat_model):
    stream = client.chat.completions.create(
        model=chat_model,
        messages=user("What's the weather in Paris and the time in Tokyo?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        max_tokens=96,
        temperature=0,
        stream=True,
    )
    text, calls, finish = _collect_stream(stream)
    assert finish == "tool_calls" and text == "", (finish, text)
    assert calls and sorted(calls) == list(range(len(calls))), calls
    for call in calls.values():
        jsonschema.validate(json.loads(call["arguments"]), _tool_parameters(call["name"]))


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 40, "pattern": "^[ -~]*$"},
        "confidence": {"type": "number"},
    },
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}


def test_bounded_json_schema_output_always_completes(client, chat_model):
    """`confidence` leaves its number unbounded: the server bounds it (no endless 0.9999…
    or 10000…), so 80 tokens always hold the whole object (at most 40 ASCII characters of
    answer and 23 of number)."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True},
    }
    for attempt in range(10):
        completion = client.chat.completions.create(
            model=chat_model,
            messages=user("Is the sky blue? Answer as JSON with an answer and your confidence from 0 to 1."),
            response_format=response_format,
            max_tokens=80,
            temperature=0.9,
            seed=attempt,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", f"attempt {attempt}: {choice.finish_reason}: {choice.message.content!r}"
        value = json.loads(choice.message.content)
        jsonschema.validate(value, ANSWER_SCHEMA)
        assert abs(value["confidence"]) < 1e15, value


REPORT_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "steps": {"type": "array", "items": {"type": "string"}},
        "severity": {"type": "string", "enum": ["low", "high"]},
    },
    "required": ["summary", "steps", "severity"],
    "additionalProperties": False,
}


def test_unbounded_strings_close_within_max_tokens(client, chat_model):
    """No maxLength anywhere and a prompt asking for length: as the budget runs out the
    strings, the array and the object close, so every output parses and validates."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "report", "schema": REPORT_SCHEMA, "strict": True},
    }
    for attempt in range(20):
        completion = client.chat.completions.create(
            model=chat_model,
            messages=user("A disk filled up overnight. Write a long, detailed incident report as JSON."),
            response_format=response_format,
            max_tokens=80,
            temperature=0.8,
            seed=100 + attempt,
        )
        choice = completion.choices[0]
        value = json.loads(choice.message.content)
        jsonschema.validate(value, REPORT_SCHEMA)
        assert completion.usage.completion_tokens <= 80


def test_tiny_max_tokens_still_reports_length(client, chat_model):
    """Bounding never hides a cut: a budget too small for the object ends with "length"."""
    completion = client.chat.completions.create(
        model=chat_model,
        messages=user("Is the sky blue? Answer as JSON."),
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}},
        max_tokens=3,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "length", choice
    assert completion.usage.completion_tokens == 3


# --- embeddings --------------------------------------------------------------------------


def _norm(vector):
    return math.sqrt(sum(x * x for x in vector))


def _cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (_norm(a) * _norm(b))


def test_embedding_of_a_string(client, embedding_model):
    response = client.embeddings.create(model=embedding_model, input="The quick brown fox.", encoding_format="float")
    assert response.object == "list"
    assert response.model == embedding_model
    assert len(response.data) == 1 and response.data[0].index == 0
    vector = response.data[0].embedding
    assert len(vector) == EMBEDDING_DIMENSIONS
    assert abs(_norm(vector) - 1.0) < 1e-3
    assert response.usage.prompt_tokens > 0
    assert response.usage.total_tokens == response.usage.prompt_tokens


def test_embeddings_of_a_list_rank_similar_sentences_closer(client, embedding_model):
    sentences = [
        "A cat is sleeping on the sofa.",
        "A kitten naps on the couch.",
        "The central bank raised interest rates by half a point.",
    ]
    response = client.embeddings.create(model=embedding_model, input=sentences, encoding_format="float")
    assert [item.index for item in response.data] == [0, 1, 2]
    vectors = [item.embedding for item in response.data]
    for vector in vectors:
        assert len(vector) == EMBEDDING_DIMENSIONS
        assert abs(_norm(vector) - 1.0) < 1e-3
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2])
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[1], vectors[2])


def test_base64_embeddings_match_floats(client, embedding_model):
    text = "Base64 and float encodings carry the same vector."
    floats = client.embeddings.create(model=embedding_model, input=text, encoding_format="float").data[0].embedding
    # Without `encoding_format` the openai client asks for base64 and decodes it itself.
    decoded = client.embeddings.create(model=embedding_model, input=text).data[0].embedding
    assert len(decoded) == len(floats)
    assert max(abs(a - b) for a, b in zip(floats, decoded)) < 1e-5


def test_embedding_input_errors(http, embedding_model):
    url = f"{BASE_URL}/embeddings"
    for body in (
        {"model": embedding_model, "input": []},
        {"model": embedding_model, "input": ""},
        {"model": embedding_model, "input": ["ok", ""]},
        {"model": embedding_model, "input": [101, 2023, 102]},
        {"model": embedding_model, "input": "x", "encoding_format": "int8"},
    ):
        assert_error_shape(http.post(url, json=body), 400)
    token_error = assert_error_shape(http.post(url, json={"model": embedding_model, "input": [[1, 2]]}), 400)
    assert "token arrays not supported" in token_error["message"]


# --- errors ------------------------------------------------------------------------------


def test_invalid_json_is_400(http):
    response = http.post(
        f"{BASE_URL}/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"}
    )
    assert_error_shape(response, 400)


def test_missing_fields_and_wrong_content_type_are_400(http, chat_model):
    assert_error_shape(http.post(f"{BASE_URL}/chat/completions", json={"model": chat_model}), 400)
    response = http.post(
        f"{BASE_URL}/chat/completions",
        content=json.dumps({"model": chat_model, "messages": user("hi")}),
        headers={"content-type": "text/plain"},
    )
    assert_error_shape(response, 400)


def test_unknown_model_is_404(http):
    body = {"model": "no-such-model", "messages": user("hi"), "max_tokens": 4}
    assert_error_shape(http.post(f"{BASE_URL}/chat/completions", json=body), 404, "model_not_found")
    embedding = {"model": "no-such-model", "input": "hi"}
    assert_error_shape(http.post(f"{BASE_URL}/embeddings", json=embedding), 404, "model_not_found")


def test_openai_client_raises_not_found_for_unknown_model(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=user("hi"), max_tokens=4)


def test_max_tokens_too_large_is_400(http, chat_model):
    body = {"model": chat_model, "messages": user("hi"), "max_tokens": 10**9}
    error = assert_error_shape(http.post(f"{BASE_URL}/chat/completions", json=body), 400)
    assert error["param"] == "max_tokens"


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"n": 2}, "n"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!", "parameters": {"type": "object"}}}]},
         "tools[0].function.name"),
    ],
)
def test_invalid_parameters_are_400(http, chat_model, extra, param):
    body = {"model": chat_model, "messages": user("hi"), "max_tokens": 4, **extra}
    error = assert_error_shape(http.post(f"{BASE_URL}/chat/completions", json=body), 400)
    assert error["param"] == param, error


def test_oversized_body_is_413(http, chat_model):
    padding = "x" * (2 * MAX_BODY_BYTES)
    body = json.dumps({"model": chat_model, "messages": user(padding), "max_tokens": 4})
    # The server answers before reading the whole body and then drops the connection, so
    # this request's connection must not go back to the shared client's pool: the next
    # test could take it up just as it closes ("Server disconnected without sending a
    # response").
    headers = {"content-type": "application/json", "connection": "close"}
    response = http.post(f"{BASE_URL}/chat/completions", content=body, headers=headers)
    assert_error_shape(response, 413)


def test_unknown_route_is_404_json(http):
    assert_error_shape(http.get(f"{BASE_URL}/no-such-route"), 404)


def test_requests_without_a_valid_api_token_are_401(http, chat_model):
    body = {"model": chat_model, "messages": user("hi"), "max_tokens": 1}
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as anonymous:
        assert_error_shape(anonymous.post(f"{BASE_URL}/chat/completions", json=body), 401, "unauthorized")
        assert_error_shape(anonymous.get(f"{BASE_URL}/models"), 401, "unauthorized")
    wrong = openai.OpenAI(base_url=BASE_URL, api_key="wdn_not_a_token", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


# --- concurrency -------------------------------------------------------------------------


def _stream_in_background(chat_model, max_tokens, started, finished, stop, errors):
    """Streams a long generation until it ends or `stop` is set."""
    body = {
        "model": chat_model,
        "messages": user("Write a long story about a dragon who learns to bake bread. Use many paragraphs."),
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": 7,
        "stream": True,
    }
    try:
        with httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=_headers()) as client:
            with client.stream("POST", f"{BASE_URL}/chat/completions", json=body) as response:
                if response.status_code != 200:
                    errors.append(f"HTTP {response.status_code}: {response.read()!r}")
                    return
                for line in response.iter_lines():
                    if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                        started.set()
                    if stop.is_set():
                        return
    except Exception as err:  # noqa: BLE001 - reported to the main thread
        errors.append(repr(err))
    finally:
        started.set()
        finished.set()


def test_healthz_is_fast_during_a_long_generation(http, chat_model):
    started, finished, stop = threading.Event(), threading.Event(), threading.Event()
    errors = []
    worker = threading.Thread(
        target=_stream_in_background, args=(chat_model, 400, started, finished, stop, errors), daemon=True
    )
    worker.start()
    try:
        assert started.wait(REQUEST_TIMEOUT_S), "the generation did not start"
        assert not errors, errors
        latencies = []
        for _ in range(5):
            if finished.is_set():
                break
            began = time.perf_counter()
            response = http.get(f"{ROOT_URL}/healthz")
            latencies.append(time.perf_counter() - began)
            assert response.status_code == 200
            time.sleep(0.05)
        assert latencies, "the generation ended before /healthz could be measured"
        # The median, so one scheduling hiccup on a loaded 2-core machine does not fail it.
        assert statistics.median(latencies) < HEALTHZ_BUDGET_S, f"/healthz latencies: {latencies}"
    finally:
        stop.set()
        worker.join(REQUEST_TIMEOUT_S)
    assert not errors, errors
    print(f"/healthz latencies during generation (ms): {[round(l * 1000, 1) for l in latencies]}, "
          f"median {statistics.median(latencies) * 1000:.1f}")


def test_client_disconnect_cancels_generation(client, chat_model):
    """Closing a stream early frees the model: a short request right after does not wait
    for the abandoned long one."""
    stream = client.chat.completions.create(
        model=chat_model,
        messages=user("Write a very long essay about the history of bread."),
        max_tokens=400,
        temperature=0.8,
        seed=11,
        stream=True,
    )
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
        if received >= 3:
            break
    stream.close()

    began = time.perf_counter()
    completion = client.chat.completions.create(
        model=chat_model, messages=user("Say yes."), max_tokens=4, temperature=0
    )
    elapsed = time.perf_counter() - began
    assert completion.choices[0].message.content is not None
    # Finishing the abandoned 400-token generation would take well over ten seconds.
    assert elapsed < 6.0, f"short request took {elapsed:.1f}s: was the abandoned generation cancelled?"
