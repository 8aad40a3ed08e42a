// E2B's template builder from the JavaScript SDK (npm `e2b`, pinned in
// package.json), unmodified, against a real `shellgate serve`: a template
// built with `Template.build` (a RUN step, a root RUN step writing to /etc,
// a COPY of a local file, an ENV) and a sandbox made from it sees all of
// them. Templates are images built by the server's image builder, so the
// server's default image is a real one made here: busybox, util-linux's
// setpriv (steps of another user) and a `/bin/bash` that is busybox's shell
// (what the SDK runs commands with). That image is made in the server's data
// directory before it starts, which a cluster's nodes are not: the suite is
// skipped there (tests/python/test_cluster_images.py builds in a cluster).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Sandbox, Template } from 'e2b';

import { clusterMode, startTemplateServer } from './harness.mjs';

const KEY = `e2b_${'e5'.repeat(20)}`;
const APPLETS = ['sh', 'cat', 'echo', 'id', 'mkdir', 'cp', 'chown', 'chmod', 'dirname', 'ls', 'rm',
  'touch', 'sleep', 'test', '[', 'mv', 'ln', 'env'];

let served;
let context;

before(async () => {
  if (clusterMode) return;
  process.env.E2B_API_KEY = KEY;
  served = await startTemplateServer({ key: `${KEY}:alpha`, name: 'e2b-templates', image: 'base-tiny', applets: APPLETS });
  context = mkdtempSync(join(tmpdir(), 'shellgate-node-template-'));
  writeFileSync(join(context, 'note.txt'), 'copied from node\n');
});

after(async () => {
  if (clusterMode) return;
  await served.stop();
  rmSync(context, { recursive: true, force: true });
});

test('templates: Template.build, then a sandbox made from it', { skip: clusterMode }, async () => {
  const name = `node-template-${randomBytes(6).toString('hex')}`;
  const template = Template({ fileContextPath: context })
    .fromBaseImage()
    .runCmd('echo from-run > /home/user/run.txt')
    .runCmd('echo from-root > /etc/marker', { user: 'root' })
    .copy('note.txt', '/home/user/note.txt')
    .setEnvs({ NODE_TEMPLATE: 'yes' });
  const logs = [];
  const info = await Template.build(template, name, { onBuildLogs: (entry) => logs.push(entry.message) });
  assert.ok(info.templateId, JSON.stringify(info));
  assert.ok(logs.some((m) => m.includes('Template ready')), JSON.stringify(logs));
  assert.equal(await Template.exists(name), true);
  const sandbox = await Sandbox.create(name, { timeoutMs: 120_000 });
  try {
    const out = await sandbox.commands.run('cat /home/user/run.txt /home/user/note.txt /etc/marker; echo "$NODE_TEMPLATE"');
    assert.equal(out.stdout, 'from-run\ncopied from node\nfrom-root\nyes\n', JSON.stringify(out));
  } finally {
    await sandbox.kill();
  }
});
