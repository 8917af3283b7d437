"""Checks that the Anthropic stub's answers parse with the official Anthropic Python SDK,
plain and streamed.

Usage: python3 anthropic_sdk_check.py BASE_URL API_KEY
BASE_URL has no /v1 (the SDK adds it). The Rust test `anthropic_sdk` starts the stub
with these faults scripted by call index: 4 -> stream cut after 4 events,
5 -> malformed JSON (streamed). By hand (pip install anthropic):
    worker-sim stub-provider --kind anthropic --listen 127.0.0.1:8091 --api-key sk-test &
    python3 anthropic_sdk_check.py http://127.0.0.1:8091 sk-test   # calls 4-5 then fail
"""

import sys

try:
    import anthropic
except ImportError:
    print("the anthropic package is not importable: pip install anthropic", file=sys.stderr)
    sys.exit(2)

SEA = dict(
    model="claude-stub-model",
    max_tokens=16,
    system="You are terse.",
    messages=[{"role": "user", "content": "Tell me about the sea"}],
)


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=10)

    # call 0: plain
    m = client.messages.create(**SEA)
    assert m.id.startswith("msg_"), m.id
    assert m.type == "message" and m.role == "assistant"
    assert m.model == "claude-stub-model"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    text = m.content[0].text

    # call 1: wrong key
    bad = anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0, timeout=10)
    try:
        bad.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("401 expected")
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401
        assert e.body["error"]["type"] == "authentication_error", e.body

    # call 2: the SDK's streaming helper: text as it arrives, then the whole message
    with client.messages.stream(**SEA) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == text, (pieces, text)
    assert len(pieces) > 1, "one piece only"
    assert final.id.startswith("msg_") and final.model == "claude-stub-model"
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn" and final.stop_sequence is None
    assert final.usage.input_tokens == m.usage.input_tokens
    assert final.usage.output_tokens == m.usage.output_tokens

    # call 3: the raw events, in the documented order
    events = list(client.messages.create(**SEA, stream=True))
    kinds = [e.type for e in events]
    deltas = len(pieces)
    want = ["message_start", "content_block_start"] + ["content_block_delta"] * deltas
    want += ["content_block_stop", "message_delta", "message_stop"]
    assert kinds == want, kinds
    assert all(e.delta.type == "text_delta" for e in events if e.type == "content_block_delta")
    assert events[-2].delta.stop_reason == "end_turn"
    assert events[-2].usage.output_tokens == m.usage.output_tokens

    # call 4: the connection drops after four events (start, block start, ping, one delta)
    received = []
    try:
        with client.messages.stream(**SEA) as stream:
            for piece in stream.text_stream:
                received.append(piece)
        raise AssertionError(f"a cut stream ended quietly after {received}")
    except AssertionError:
        raise
    except Exception as e:  # httpx's RemoteProtocolError or the SDK's wrapper of it
        print(f"cut stream raised {type(e).__name__} after {len(received)} pieces")
    assert received == pieces[:1], received

    # call 5: malformed JSON in an event must not parse
    try:
        with client.messages.stream(**SEA) as stream:
            stream.get_final_message()
        raise AssertionError("malformed stream event accepted")
    except AssertionError:
        raise
    except Exception as e:
        print(f"malformed stream event refused: {type(e).__name__}")

    print(f"anthropic SDK {anthropic.__version__}: all checks passed")


if __name__ == "__main__":
    main()
