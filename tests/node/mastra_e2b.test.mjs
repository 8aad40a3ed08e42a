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
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { E2BSandbox } from '@mastra/e2b';

import { binary, clusterMode, startServer } from './harness.mjs';

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

function importBase(dataDir) {
  const work = mkdtempSync(join(tmpdir(), 'shellgate-node-mastra-base-'));
  try {
    const rootfs = join(work, 'rootfs');
    mkdirSync(join(rootfs, 'bin'), { recursive: true });
    mkdirSync(join(rootfs, 'etc'));
    mkdirSync(join(rootfs, 'usr', 'bin'), { recursive: true });
    copyFileSync('/bin/busybox', join(rootfs, 'bin', 'busybox'));
    chmodSync(join(rootfs, 'bin', 'busybox'), 0o755);
    for (const applet of APPLETS) symlinkSync('busybox', join(rootfs, 'bin', applet));
    writeFileSync(join(rootfs, 'bin', 'bash'), '#!/bin/sh\nexec /bin/sh "$@"\n', { mode: 0o755 });
    writeFileSync(join(rootfs, 'usr', 'bin', 'apt-get'), STAND_IN_APT, { mode: 0o755 });
    const linked = spawnSync('ldd', ['/usr/bin/setpriv'], { encoding: 'utf8' });
    assert.equal(linked.status, 0, linked.stderr);
    const paths = ['/usr/bin/setpriv', ...linked.stdout.split(/\s+/).filter((w) => w.startsWith('/'))];
    for (const path of paths) {
      const target = join(rootfs, path);
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(path, target);
      chmodSync(target, 0o755);
    }
    const tarball = join(work, 'image.tar');
    const tar = spawnSync('tar', ['-cf', tarball, '-C', rootfs, '.'], { encoding: 'utf8' });
    assert.equal(tar.status, 0, tar.stderr);
    const imported = spawnSync(binary, ['--data-dir', dataDir, 'image', 'import', 'base-apt', tarball], {
      encoding: 'utf8',
    });
    assert.equal(imported.status, 0, imported.stderr);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

let server;
let images;

before(async () => {
  if (clusterMode) return;
  images = mkdtempSync(join(tmpdir(), 'shellgate-node-mastra-images-'));
  chmodSync(images, 0o755);
  importBase(images);
  server = await startServer({
    key: `${KEY}:alpha`, name: 'mastra-e2b', worldReadable: true,
    env: { SHELLGATE_DEFAULT_IMAGE: 'base-apt', SHELLGATE_IMAGES_DIR: join(images, 'sandbox', 'images') },
  });
  const root = server.baseURLs[0].replace(/\/v1$/, '');
  process.env.E2B_API_KEY = KEY;
  process.env.E2B_API_URL = root;
  process.env.E2B_SANDBOX_URL = root;
  delete process.env.E2B_DEBUG;
});

after(async () => {
  if (clusterMode) return;
  await server.stop();
  rmSync(images, { recursive: true, force: true });
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
