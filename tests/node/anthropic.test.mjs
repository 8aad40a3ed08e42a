// Anthropic's code execution through the official `@anthropic-ai/sdk`, its
// base URL shellgate's, over a scripted Chat Completions upstream (a test
// fixture): the model's bash command and Python cell run in a shellgate
// container and come back as Anthropic's blocks, read by the SDK (its
// stream helper accumulates the streamed one).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

import { startScriptedUpstream, startServer } from './harness.mjs';

const KEY = 'sk-node-anthropic-tests';

let server;
let upstream;

// The script: "Call NAME: JSON" with NAME offered → a call of it; a tool
// result → "Done: <result>"; anything else → a greeting.
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: `Done: ${last.content}` };
  const text = typeof last.content === 'string' ? last.content : '';
  const asked = /^Call (\w+): (.*)$/s.exec(text);
  if (asked && tools.includes(asked[1])) return { tool: [asked[1], JSON.parse(asked[2])] };
  return { text: 'Hello from the scripted model.' };
}

before(async () => {
  upstream = await startScriptedUpstream(decide);
  server = await startServer({
    key: KEY, name: 'anthropic', env: { SHELLGATE_UPSTREAM_URL: upstream.url },
  });
});

after(async () => {
  await server.stop();
  upstream.close();
});

test('anthropic: code execution runs a command, then a streamed Python cell on its container', async () => {
  // The SDK adds /v1 itself: its base URL is the server's root.
  const client = new Anthropic({
    apiKey: KEY, baseURL: server.baseURL.replace(/\/v1$/, ''), maxRetries: 0,
  });
  const tools = [{ type: 'code_execution_20260120', name: 'code_execution' }];
  const command = { command: 'echo from-bash' };
  const bash = await client.messages.create({
    model: 'scripted', max_tokens: 256, tools,
    messages: [{ role: 'user', content: `Call bash_code_execution: ${JSON.stringify(command)}` }],
  });
  const seen = JSON.stringify(bash);
  assert.equal(bash.content.length, 3, seen);
  const [call, result, answer] = bash.content;
  assert.equal(call.type, 'server_tool_use', seen);
  assert.equal(call.name, 'bash_code_execution', seen);
  assert.deepEqual(call.input, command, seen);
  assert.equal(result.type, 'bash_code_execution_tool_result', seen);
  assert.equal(result.tool_use_id, call.id, seen);
  assert.deepEqual(result.content, {
    type: 'bash_code_execution_result', stdout: 'from-bash\n', stderr: '', return_code: 0, content: [],
  }, seen);
  assert.ok(answer.text.startsWith('Done: from-bash'), seen);
  assert.equal(bash.stop_reason, 'end_turn', seen);
  assert.ok(bash.container.id.startsWith('cntr_') && bash.container.expires_at, seen);

  const cell = { code: 'answer = 6 * 7\nprint(answer)' };
  const starts = [];
  const stream = client.messages.stream({
    model: 'scripted', max_tokens: 256, tools, container: bash.container.id,
    messages: [{ role: 'user', content: `Call code_execution: ${JSON.stringify(cell)}` }],
  });
  stream.on('streamEvent', (event) => {
    if (event.type === 'content_block_start') starts.push(event.content_block.type);
  });
  const message = await stream.finalMessage();
  const streamed = JSON.stringify({ starts, message });
  assert.deepEqual(starts, ['server_tool_use', 'code_execution_tool_result', 'text'], streamed);
  const [python, ran] = message.content;
  assert.equal(python.name, 'code_execution', streamed);
  // Built by the helper from the streamed input_json_delta.
  assert.deepEqual(python.input, cell, streamed);
  assert.equal(ran.tool_use_id, python.id, streamed);
  assert.deepEqual(ran.content, {
    type: 'code_execution_result', stdout: '42\n', stderr: '', return_code: 0, content: [],
  }, streamed);
  assert.equal(message.container.id, bash.container.id, streamed);
});
