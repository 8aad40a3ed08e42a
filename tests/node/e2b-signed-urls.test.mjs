// E2B's signed file URLs from the JavaScript SDK (npm `e2b`, unmodified):
// `uploadUrl()` / `downloadUrl()` built from E2B_SANDBOX_URL (so naming no
// sandbox) and used with plain `fetch`, no header at all, as on E2B; a
// signature for another path, operation or expiry, or a changed one, is
// refused in E2B's `{code, message}`. In cluster mode the URLs go through
// the other replica than the one that made the sandbox.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from 'e2b';

import { startServer } from './harness.mjs';

const KEY = `e2b_${'e5'.repeat(20)}`;

let server;
let sandbox;

before(async () => {
  server = await startServer({ key: `${KEY}:alpha`, name: 'e2b-signed-urls' });
  const roots = server.baseURLs.map((url) => url.replace(/\/v1$/, ''));
  process.env.E2B_API_KEY = KEY;
  process.env.E2B_API_URL = roots[0];
  process.env.E2B_SANDBOX_URL = roots[roots.length - 1];
  delete process.env.E2B_DEBUG;
  sandbox = await Sandbox.create({ timeoutMs: 300_000, secure: true });
});

after(async () => {
  await sandbox?.kill().catch(() => {});
  await server.stop();
});

async function assertRefused(response, message) {
  const text = await response.text();
  assert.equal(response.status, 401, text);
  assert.deepEqual(JSON.parse(text), { code: 401, message }, text);
}

test('signed URLs upload and download with no header', async () => {
  const path = '/home/user/signed/from node.txt';
  const upload = await sandbox.uploadUrl(path);
  assert.ok(upload.includes('signature=') && !upload.includes(sandbox.sandboxId), upload);
  const form = new FormData();
  form.append('file', new Blob(['signed from node\n']), 'from node.txt');
  const sent = await fetch(upload, { method: 'POST', body: form });
  const sentText = await sent.text();
  assert.equal(sent.status, 200, sentText);
  assert.equal(JSON.parse(sentText)[0].path, path, sentText);
  assert.equal(await sandbox.files.read(path), 'signed from node\n');

  const got = await fetch(await sandbox.downloadUrl(path, { useSignatureExpiration: 120 }));
  const gotText = await got.text();
  assert.equal(got.status, 200, gotText);
  assert.equal(gotText, 'signed from node\n');
});

test('signed URLs open only their path, operation and expiry', async () => {
  const path = '/home/user/kept.txt';
  await sandbox.files.write(path, 'kept');
  const download = new URL(await sandbox.downloadUrl(path));

  const tampered = new URL(download);
  const signature = tampered.searchParams.get('signature');
  tampered.searchParams.set('signature', signature.slice(0, -1) + (signature.endsWith('A') ? 'B' : 'A'));
  await assertRefused(await fetch(tampered), 'invalid signature');

  const otherPath = new URL(download);
  otherPath.searchParams.set('path', '/home/user/other.txt');
  await assertRefused(await fetch(otherPath), 'invalid signature');

  await assertRefused(await fetch(await sandbox.uploadUrl(path)), 'invalid signature');

  const expiring = new URL(await sandbox.downloadUrl(path, { useSignatureExpiration: 60 }));
  const later = new URL(expiring);
  later.searchParams.set('signature_expiration', String(Number(expiring.searchParams.get('signature_expiration')) + 3600));
  await assertRefused(await fetch(later), 'invalid signature');

  // Signed for a time past (with the SDK's own recipe: a negative expiry).
  const expired = await sandbox.downloadUrl(path, { useSignatureExpiration: -10 });
  await assertRefused(await fetch(expired), 'signature is already expired');
  assert.equal(await sandbox.files.read(path), 'kept');
});
