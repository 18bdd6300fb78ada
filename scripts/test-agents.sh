#!/usr/bin/env bash
# The real agent CLIs through the gateway: install Claude Code, Codex and Gemini CLI from npm into
# .agents/ when they are missing (or another version is asked for), then run tests/agents.
# Needs Node.js 18+ with npm. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

if ! command -v npm >/dev/null; then
  echo "scripts/test-agents.sh needs Node.js 18+ with npm (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:-2.1.197}
CODEX_VERSION=${CODEX_VERSION:-0.171.0}
GEMINI_CLI_VERSION=${GEMINI_CLI_VERSION:-0.61.0}
installed() {  # the version of the npm package $1 in .agents, or nothing
  node -p "require('./.agents/node_modules/$1/package.json').version" 2>/dev/null || true
}
if [ "$(installed @anthropic-ai/claude-code)" != "$CLAUDE_CODE_VERSION" ] ||
  [ "$(installed @openai/codex)" != "$CODEX_VERSION" ] ||
  [ "$(installed @google/gemini-cli)" != "$GEMINI_CLI_VERSION" ]; then
  mkdir -p .agents
  [ -f .agents/package.json ] || echo '{"private": true}' >.agents/package.json
  npm install --prefix .agents --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" \
    "@google/gemini-cli@$GEMINI_CLI_VERSION"
fi
SHUNTER_AGENTS=1 .venv/bin/pytest -q -m agents tests/agents "$@"
