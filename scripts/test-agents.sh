#!/usr/bin/env bash
# The real agent CLIs through the gateway: install Claude Code (a pinned version and the newest, the
# latter under the npm alias claude-code-new), Codex, Gemini CLI and the Vercel AI SDK with its
# Anthropic provider from npm into .agents/ when they are missing (or another version is asked
# for), then run tests/agents. Needs Node.js 18+ with npm. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

if ! command -v npm >/dev/null; then
  echo "scripts/test-agents.sh needs Node.js 18+ with npm (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:-2.1.197}
CLAUDE_CODE_NEW_VERSION=${CLAUDE_CODE_NEW_VERSION:-2.1.332}
CODEX_VERSION=${CODEX_VERSION:-0.171.0}
GEMINI_CLI_VERSION=${GEMINI_CLI_VERSION:-0.61.0}
AI_SDK_VERSION=${AI_SDK_VERSION:-7.0.185}
AI_SDK_ANTHROPIC_VERSION=${AI_SDK_ANTHROPIC_VERSION:-4.0.112}
installed() {  # the version of the npm package in the folder $1 of .agents, or nothing
  node -p "require('./.agents/node_modules/$1/package.json').version" 2>/dev/null || true
}
if [ "$(installed @anthropic-ai/claude-code)" != "$CLAUDE_CODE_VERSION" ] ||
  [ "$(installed claude-code-new)" != "$CLAUDE_CODE_NEW_VERSION" ] ||
  [ "$(installed @openai/codex)" != "$CODEX_VERSION" ] ||
  [ "$(installed @google/gemini-cli)" != "$GEMINI_CLI_VERSION" ] ||
  [ "$(installed ai)" != "$AI_SDK_VERSION" ] ||
  [ "$(installed @ai-sdk/anthropic)" != "$AI_SDK_ANTHROPIC_VERSION" ]; then
  mkdir -p .agents
  [ -f .agents/package.json ] || echo '{"private": true}' >.agents/package.json
  npm install --prefix .agents --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
    "claude-code-new@npm:@anthropic-ai/claude-code@$CLAUDE_CODE_NEW_VERSION" \
    "@openai/codex@$CODEX_VERSION" "@google/gemini-cli@$GEMINI_CLI_VERSION" \
    "ai@$AI_SDK_VERSION" "@ai-sdk/anthropic@$AI_SDK_ANTHROPIC_VERSION"
fi
SHUNTER_AGENTS=1 .venv/bin/pytest -q -m agents tests/agents "$@"
