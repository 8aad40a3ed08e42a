#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: installs the baselines (bubblewrap, hyperfine,
# nginx-light, wrk), then runs the engine, HTTP, Responses and egress
# and image benchmarks, each measuring its baselines in the same run as shellgate.
# Pass --quick for shorter runs, --only PART,PART to run some parts alone
# (one run of them, beside each other: engine, http, responses, egress, cli,
# images, interactive, e2b, console, cluster, streams, scale, suspended,
# hyperfine). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
only=""
while (($#)); do
  case "$1" in
    --quick) quick=(--quick) ;;
    --only) only=",$2,"; shift ;;
    --only=*) only=",${1#--only=},"; ;;
    *) echo "unknown argument: $1 (--quick, --only PART,...)" >&2; exit 2 ;;
  esac
  shift
done
# Whether part $1 runs.
part() { [[ -z "$only" || "$only" == *",$1,"* ]]; }
missing=()
for package in bubblewrap hyperfine e2fsprogs nginx-light wrk openssl iproute2; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
part engine && cargo bench -p shellgate --bench engine -- "${quick[@]}"
part http && cargo bench -p shellgate --bench http -- "${quick[@]}"
part responses && cargo bench -p shellgate --bench responses -- "${quick[@]}"
cargo build --release -p shellgate
# The egress proxy against direct HTTPS, with nginx and wrk in a network
# namespace of its own (see the script).
if ! part egress; then :
elif ((${#quick[@]})); then
  python3 bench/egress.py --seconds 2 --rounds 1 --creates 3
else
  python3 bench/egress.py
fi
# The command line as a user times it: one-shot exec against bwrap, serve
# start-up.
if ! part cli; then :
elif ((${#quick[@]})); then
  python3 bench/cli.py --runs 50 --rounds 5
else
  python3 bench/cli.py
fi
# Create time per image and the disk 100 containers of one image use (it
# builds debian-12-slim and debian-12 into the shared image cache if needed).
if ! part images; then :
elif ((${#quick[@]})); then
  python3 bench/images.py --rounds 5 --containers 20
else
  python3 bench/images.py
fi
# Interactive sandboxes: a keystroke through the PTY WebSocket
# against a local pty, a 1 GiB file through the API against cat, a
# 10,000-file tree's tar export against the host's tar (the venv brings the
# `websockets` client).
if ! .venv/bin/python -c "import websockets" 2>/dev/null; then
  python3 -m venv .venv && .venv/bin/pip install --quiet websockets
fi
if ! part interactive; then :
elif ((${#quick[@]})); then
  .venv/bin/python bench/interactive.py --only pty --rounds 200
  .venv/bin/python bench/interactive.py --only files --rounds 1
  .venv/bin/python bench/interactive.py --only archive --rounds 3
else
  .venv/bin/python bench/interactive.py
fi
# E2B's SDKs: Sandbox.create() to the first output through the
# e2b SDK against the same through shellgate's API; run_code("1+1") in a
# warm context against python3 -c through exec (scripts/test's venv has
# both SDKs).
if ! part e2b; then :
elif ((${#quick[@]})); then
  .venv/bin/python bench/e2b_sdks.py --rounds 5
else
  .venv/bin/python bench/e2b_sdks.py
fi
# The web console: bytes per first page load and time to the
# containers list's first render at 1,000 and 10,000 real containers
# (~22 GB of disk for a while), in Debian's headless chromium, against
# fetching the same page from the API in the same browser (bench/console.sh
# installs chromium and playwright-core if missing).
if ! part console; then :
elif ((${#quick[@]})); then
  bench/console.sh --counts 200,1000 --rounds 5
else
  bench/console.sh
fi
# The cluster: exec through an API replica to a node in a network
# namespace of its own against exec on a single box, and creates per second
# with one node and with three (the test harness builds the cluster: Postgres,
# moto's S3 and the namespaces; the test venv has moto and requests).
if ! part cluster; then :
elif ((${#quick[@]})); then
  SHELLGATE_BIN="$PWD/target/release/shellgate" .venv/bin/python bench/cluster.py --rounds 2 --per-round 50 --creates 100
else
  SHELLGATE_BIN="$PWD/target/release/shellgate" .venv/bin/python bench/cluster.py
fi
# Output nobody reads: the server's RSS with 500 streams of each kind whose
# clients never read, and after they closed; its CPU with a process and a
# streamed exec nobody reads (stdlib only).
if ! part streams; then :
elif ((${#quick[@]})); then
  SHELLGATE_BIN="$PWD/target/release/shellgate" python3 bench/streams.py --streams 100
else
  SHELLGATE_BIN="$PWD/target/release/shellgate" python3 bench/streams.py
fi
# Live containers at scale: 1,000, 5,000 and 10,000 live containers made
# through the API, a mixed load from 32 clients against the empty server's,
# memory, descriptors and threads, a restart, the deletes and what they left
# (stdlib only; it stops creating below 6 GiB of MemAvailable and says so).
if ! part scale; then :
elif ((${#quick[@]})); then
  python3 bench/scale.py --counts 200 --seconds 5
else
  python3 bench/scale.py
fi
# Suspended containers at scale: N containers made and suspended through the
# API, their disk and memory, listings, a warm and a cold restart (stdlib
# only; --keep/--reuse compare binaries on the same containers).
if ! part suspended; then :
elif ((${#quick[@]})); then
  python3 bench/suspended.py --count 500
else
  python3 bench/suspended.py --count 10000 --cold
fi
# The baselines as whole commands, for a second opinion from hyperfine.
part hyperfine || exit 0
table=$(mktemp)
hyperfine -N --warmup 20 --runs 300 --style none --export-markdown "$table" \
  '/bin/true' 'bash -c true' \
  'bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp true' \
  >/dev/null
echo
cat "$table"
rm -f "$table"
