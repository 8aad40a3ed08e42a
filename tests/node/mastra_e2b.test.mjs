// Mastra's E2B sandbox (npm `@mastra/e2b`, pinned in package.json),
// unmodified, against a real `shellgate serve` with its default template
// path: no `template` option, so `E2BSandbox` looks up its mountable
// template (`mastra-<hash>`) with `Template.exists`, builds it with E2B's
// template API (`Template().fromTemplate('base').aptInstall(['s3fs',
// 'fuse'])`: `apt-get` as root), makes its sandbox from it with
// `Sandbox.create`, and runs a command there.
//
// The template's `apt-get install` needs Debian's archive, which tests do
// not reach: the server's default image here is busybox with a stand-in
// `apt-get` that, as apt does, refuses anyone but root and records what it
// installs, so the test sees the step ran as root and its files are in the
// sandbox. Against a server whose egress lets builds reach deb.debian.org
// and whose default image is debian-12, the same path installs the real
// packages. Its default image is made in the server's data directory before
// it starts, which a cluster's nodes are not: the suite is skipped there.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { E2BSandbox } from '@mastra/e2b';

import { clusterMode, startTemplateServer } from './harness.mjs';

const KEY = `e2b_${'e6'.repeat(20)}`;
const APPLETS = ['sh', 'cat', 'echo', 'id', 'mkdir', 'cp', 'chown', 'chmod', 'dirname', 'ls', 'rm',
  'touch', 'sleep', 'test', '[', 'mv', 'ln', 'env', 'mountpoint', 'grep', 'base64', 'printf'];

// What the image's apt-get does in place of Debian's (see above).
const STAND_IN_APT = `#!/bin/sh
[ "$(id -u)" = 0 ] || { echo "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)" >&2; exit 100; }
case "$1" in
  update) echo "Reading package lists... Done" ;;
  install)
    shift
    mkdir -p /var/lib/stand-in-apt
    for package in "$@"; do
      case "$package" in -*) ;; *) echo "Setting up $package" && echo installed > "/var/lib/stand-in-apt/$package" ;; esac
    done ;;
  *) echo "E: Invalid operation $1" >&2; exit 100 ;;
esac
`;

let served;

before(async () => {
  if (clusterMode) return;
  process.env.E2B_API_KEY = KEY;
  served = await startTemplateServer({
    key: `${KEY}:alpha`, name: 'mastra-e2b', image: 'base-apt', applets: APPLETS,
    files: { '/usr/bin/apt-get': [STAND_IN_APT, 0o755] },
  });
});

after(async () => {
  if (clusterMode) return;
  await served.stop();
});

test('mastra: E2BSandbox with its default template path builds the template and runs a command',
  { skip: clusterMode }, async () => {
    const sandbox = new E2BSandbox({ id: 'mastra-default-template', timeout: 120_000 });
    await sandbox.start();
    try {
      const out = await sandbox.e2b.commands.run(
        'cat /var/lib/stand-in-apt/s3fs /var/lib/stand-in-apt/fuse; id -u; echo "$HOME"',
      );
      assert.equal(out.stdout, 'installed\ninstalled\n1000\n/home/user\n', JSON.stringify(out));
      // A second sandbox of the same configuration finds the template built.
      const again = new E2BSandbox({ id: 'mastra-default-template-2', timeout: 120_000 });
      await again.start();
      try {
        const second = await again.e2b.commands.run('cat /var/lib/stand-in-apt/s3fs');
        assert.equal(second.stdout, 'installed\n', JSON.stringify(second));
      } finally {
        await again.destroy();
      }
    } finally {
      await sandbox.destroy();
    }
  });
