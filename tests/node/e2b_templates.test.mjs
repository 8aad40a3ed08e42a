// E2B's template builder from the JavaScript SDK (npm `e2b`, pinned in
// package.json), unmodified, against a real `shellgate serve`: a template
// built with `Template.build` (a RUN step, a COPY of a local file, an ENV)
// and a sandbox made from it sees all three.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Sandbox, Template } from 'e2b';

import { startServer } from './harness.mjs';

const KEY = `e2b_${'e5'.repeat(20)}`;

let server;
let context;

before(async () => {
  server = await startServer({ key: `${KEY}:alpha`, name: 'e2b-templates' });
  const root = server.baseURLs[0].replace(/\/v1$/, '');
  process.env.E2B_API_KEY = KEY;
  process.env.E2B_API_URL = root;
  process.env.E2B_SANDBOX_URL = root;
  delete process.env.E2B_DEBUG;
  context = mkdtempSync(join(tmpdir(), 'shellgate-node-template-'));
  writeFileSync(join(context, 'note.txt'), 'copied from node\n');
});

after(async () => {
  await server.stop();
  rmSync(context, { recursive: true, force: true });
});

test('templates: Template.build, then a sandbox made from it', async () => {
  const name = `node-template-${randomBytes(6).toString('hex')}`;
  const template = Template({ fileContextPath: context })
    .fromBaseImage()
    .runCmd('echo from-run > /home/user/run.txt')
    .copy('note.txt', '/home/user/note.txt')
    .setEnvs({ NODE_TEMPLATE: 'yes' });
  const logs = [];
  const info = await Template.build(template, name, { onBuildLogs: (entry) => logs.push(entry.message) });
  assert.ok(info.templateId, JSON.stringify(info));
  assert.ok(logs.some((m) => m.includes('Template ready')), JSON.stringify(logs));
  assert.equal(await Template.exists(name), true);
  const sandbox = await Sandbox.create(name, { timeoutMs: 120_000 });
  try {
    const out = await sandbox.commands.run('cat /home/user/run.txt /home/user/note.txt; echo "$NODE_TEMPLATE"');
    assert.equal(out.stdout, 'from-run\ncopied from node\nyes\n', JSON.stringify(out));
  } finally {
    await sandbox.kill();
  }
});
