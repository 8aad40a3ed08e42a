#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: installs the baselines (bubblewrap, hyperfine),
# then runs the engine and HTTP benchmarks, each measuring its baselines in
# the same run as shellgate. Pass --quick for shorter runs. Needs root.
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
cargo bench -p shellgate --bench http -- "$@"
cargo bench -p shellgate --bench responses -- "$@"
# The baselines as whole commands, for a second opinion from hyperfine.
table=$(mktemp)
hyperfine -N --warmup 20 --runs 300 --style none --export-markdown "$table" \
  '/bin/true' 'bash -c true' \
  'bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp true' \
  >/dev/null
echo
cat "$table"
rm -f "$table"
