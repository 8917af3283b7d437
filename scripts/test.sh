#!/usr/bin/env bash
# The project's test command: installs the test-only outside pieces (the
# official x402 TypeScript client, the OpenAI and Anthropic Python SDKs) when missing, then
# runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -f x402/interop/package-lock.json ] && [ ! -d x402/interop/node_modules ]; then
  echo "== installing the x402 interop client (npm ci)"
  npm ci --prefix x402/interop --no-audit --no-fund --loglevel=error
fi
if ! python3 -c 'import openai' 2>/dev/null; then
  echo "== installing the OpenAI Python SDK (for the provider-stub check)"
  python3 -m pip install --quiet --disable-pip-version-check openai
fi
if ! python3 -c 'import anthropic' 2>/dev/null; then
  echo "== installing the Anthropic Python SDK (for the provider-stub check)"
  python3 -m pip install --quiet --disable-pip-version-check anthropic
fi

echo "== cargo test --workspace"
cargo test --workspace --all-targets "$@"
# --all-targets leaves out doctests (the x402 commit-handler and router examples).
cargo test --workspace --doc "$@"
