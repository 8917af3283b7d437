"""Manual check: the Anthropic stub's answers parse with the official Anthropic Python SDK.

Usage (pip install anthropic):
    worker-sim stub-provider --kind anthropic --listen 127.0.0.1:8091 --api-key sk-test &
    python3 anthropic_sdk_check.py http://127.0.0.1:8091 sk-test
BASE_URL has no /v1 (the SDK adds it).
"""

import sys

try:
    import anthropic
except ImportError:
    print("the anthropic package is not importable: pip install anthropic", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=10)
    m = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=16,
        system="You are terse.",
        messages=[{"role": "user", "content": "Tell me about the sea"}],
    )
    assert m.id.startswith("msg_"), m.id
    assert m.type == "message" and m.role == "assistant"
    assert m.model == "claude-sonnet-4-5"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0

    bad = anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0, timeout=10)
    try:
        bad.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("401 expected")
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401
        assert e.body["error"]["type"] == "authentication_error", e.body

    print(f"anthropic SDK {anthropic.__version__}: all checks passed")


if __name__ == "__main__":
    main()
