"""Checks that the OpenAI stub's answers parse with the official OpenAI Python SDK.

Usage: python3 openai_sdk_check.py BASE_URL API_KEY
BASE_URL ends in /v1. The Rust test `openai_sdk` starts the stub with these
faults scripted by call index: 3 -> 429 (retry-after 2), 4 -> 500, 5 -> malformed JSON.
"""

import sys

try:
    import openai
    from openai import OpenAI
except ImportError:
    print("the openai package is not importable: pip install openai", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=10)

    # call 0: plain prompt, typed response objects
    r = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Tell me about the sea"}],
        max_tokens=16,
    )
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

    print(f"openai SDK {openai.__version__}: all checks passed")


if __name__ == "__main__":
    main()
