"""Checks that the OpenAI stub's answers parse with the official OpenAI Python SDK.

Usage: python3 openai_sdk_check.py BASE_URL API_KEY
BASE_URL ends in /v1. The Rust test `openai_sdk` starts the stub with these
faults scripted by call index: 3 -> 429 (retry-after 2), 4 -> 500, 5 -> malformed JSON,
9 -> stream cut after 3 events, 10 -> malformed JSON (streamed).
"""

import sys

try:
    import openai
    from openai import OpenAI
except ImportError:
    print("the openai package is not importable: pip install openai", file=sys.stderr)
    sys.exit(2)


SEA = dict(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Tell me about the sea"}],
    max_tokens=16,
)


def check_streaming(client, plain) -> None:
    """Calls 6-10: the same prompt as call 0, streamed."""
    text = plain.choices[0].message.content

    # call 6: stream with usage; the pieces add up to the plain answer
    chunks = list(
        client.chat.completions.create(**SEA, stream=True, stream_options={"include_usage": True})
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(c.model == "gpt-4o-mini" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text, (streamed, text)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1, "one piece only"
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishing == ["stop"], finishing
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == plain.usage.model_dump(), chunks[-1].usage
    assert all(c.usage is None for c in chunks[:-1])

    # call 7: stream without usage
    chunks = list(client.chat.completions.create(**SEA, stream=True))
    assert all(c.usage is None and c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text

    # call 8: the SDK's streaming helper, which accumulates the final completion
    completions = client.chat.completions
    helper = completions.stream if hasattr(completions, "stream") else client.beta.chat.completions.stream
    with helper(**SEA) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == text
    assert final.choices[0].message.content == text
    assert final.choices[0].finish_reason == "stop"

    # call 9: the connection drops after three events: an error, not a short answer
    received = []
    try:
        for c in client.chat.completions.create(**SEA, stream=True):
            received.append(c.choices[0].delta.content or "")
        raise AssertionError(f"a cut stream ended quietly after {received}")
    except AssertionError:
        raise
    except Exception as e:  # httpx's RemoteProtocolError or the SDK's wrapper of it
        print(f"cut stream raised {type(e).__name__} after {len(received)} chunks")
    assert len(received) == 3 and "".join(received) != text, received

    # call 10: malformed JSON in an event must not parse
    try:
        list(client.chat.completions.create(**SEA, stream=True))
        raise AssertionError("malformed stream event accepted")
    except AssertionError:
        raise
    except Exception as e:
        print(f"malformed stream event refused: {type(e).__name__}")


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=10)

    # call 0: plain prompt, typed response objects
    r = client.chat.completions.create(**SEA)
    plain = r
    assert r.id.startswith("chatcmpl-"), r.id
    assert r.object == "chat.completion"
    assert isinstance(r.created, int)
    assert r.model == "gpt-4o-mini"
    choice = r.choices[0]
    assert choice.index == 0 and choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    # call 1: system message and content parts; extract_json-style answer
    r = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "Answer with one JSON object."},
            {"role": "user", "content": [{"type": "text", "text": "name: Ada, age: 36"}]},
        ],
    )
    import json

    assert json.loads(r.choices[0].message.content) == {"name": "Ada", "age": 36}

    # call 2: wrong key
    bad = OpenAI(base_url=base_url, api_key="wrong", max_retries=0, timeout=10)
    try:
        bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("401 expected")
    except openai.AuthenticationError as e:
        assert e.status_code == 401
        assert e.code == "invalid_api_key", e.code

    # call 3: 429 with retry-after
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("429 expected")
    except openai.RateLimitError as e:
        assert e.status_code == 429
        assert e.response.headers["retry-after"] == "2"
        assert e.code == "rate_limit_exceeded", e.code

    # call 4: 500
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("500 expected")
    except openai.InternalServerError as e:
        assert e.status_code == 500

    # call 5: malformed JSON must not parse
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("malformed JSON accepted")
    except AssertionError:
        raise
    except Exception as e:  # the SDK's exact exception type varies by version
        print(f"malformed JSON refused: {type(e).__name__}")

    models = client.models.list()
    assert [m.id for m in models.data] == ["stub-model"]

    check_streaming(client, plain)

    print(f"openai SDK {openai.__version__}: all checks passed")


if __name__ == "__main__":
    main()
