#!/usr/bin/env bash
# The web console's page weight and speed (BENCHMARKS.md, "Web console"):
# installs what bench/console.mjs needs if it is missing
# (Debian's chromium; playwright-core from tests/node's lockfile; no browser
# is downloaded), builds the release binary if there is none, then runs it.
# Arguments go to bench/console.mjs (--counts 1000,10000 --rounds 15 ...).
# Needs root (the server makes sandboxes).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
if [[ ! -f tests/node/node_modules/playwright-core/package.json ]]; then
  (cd tests/node && npm ci)
fi
if [[ -z "${SHELLGATE_BIN:-}" && ! -x target/release/shellgate ]]; then
  cargo build --release -p shellgate
fi
exec node bench/console.mjs "$@"
