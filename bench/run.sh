#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: installs the baselines (bubblewrap, hyperfine),
# then runs the engine benchmark, which measures every baseline in the same
# run as shellgate. Pass --quick for a shorter run. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
for package in bubblewrap hyperfine e2fsprogs; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cargo bench -p shellgate --bench engine -- "$@"
# The same baselines as whole commands, for a second opinion from hyperfine.
hyperfine -N --warmup 20 --runs 300 --export-markdown /dev/stdout \
  '/bin/true' 'bash -c true' \
  'bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp true' \
  2>/dev/null | tail -n +1
