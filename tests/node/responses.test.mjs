// The Responses API with the hosted shell tool through the official `openai`
// Node SDK, against a scripted Chat Completions upstream (a test fixture).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { startScriptedUpstream, startServer } from './harness.mjs';

const KEY = 'sk-node-responses';

let server;
let upstream;
let client;

// The script: "Execute: CMD" → a call of the `shell` tool; a tool result →
// "Done: <result>"; anything else → a greeting. Streams when asked to.
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: `Done: ${last.content}` };
  const text = typeof last.content === 'string' ? last.content : '';
  if (text.includes('Execute: ') && tools.includes('shell')) {
    return { tool: ['shell', { commands: [text.split('Execute: ')[1].split('\n')[0].trim()] }] };
  }
  return { text: 'Hello from the scripted model.' };
}

before(async () => {
  upstream = await startScriptedUpstream(decide);
  server = await startServer({
    key: KEY, name: 'responses', env: { SHELLGATE_UPSTREAM_URL: upstream.url },
  });
  // Each request through the next replica in cluster mode (harness.mjs).
  client = new OpenAI({ apiKey: KEY, baseURL: server.baseURL, fetch: server.fetch, maxRetries: 0 });
});

after(async () => {
  await server.stop();
  upstream.close();
});

test('responses: container_auto runs the model\'s shell call', async () => {
  const response = await client.responses.create({
    model: 'scripted',
    tools: [{ type: 'shell', environment: { type: 'container_auto' } }],
    input: 'Execute: echo from-node && node --version',
  });
  assert.equal(response.status, 'completed');
  assert.deepEqual(response.output.map((i) => i.type), ['shell_call', 'shell_call_output', 'message']);
  const [call, result] = response.output;
  assert.equal(call.environment.type, 'container_reference');
  assert.match(result.output[0].stdout, /^from-node\nv\d+/);
  assert.match(response.output_text, /^Done: /);
  const again = await client.responses.retrieve(response.id);
  assert.equal(again.id, response.id);
});

test('responses: streaming gives the typed events and the final response', async () => {
  const stream = client.responses.stream({
    model: 'scripted',
    tools: [{ type: 'shell', environment: { type: 'container_auto' } }],
    input: 'Execute: echo streamed',
  });
  const kinds = [];
  for await (const event of stream) kinds.push(event.type);
  const final = await stream.finalResponse();
  assert.equal(kinds[0], 'response.created');
  assert.equal(kinds.at(-1), 'response.completed');
  assert.ok(kinds.includes('response.shell_call_output_content.delta'), kinds.join(' '));
  assert.ok(kinds.includes('response.output_text.delta'));
  assert.match(final.output_text, /streamed/);
});

test('responses: the local environment hands the shell call back', async () => {
  const tools = [{ type: 'shell', environment: { type: 'local' } }];
  const response = await client.responses.create({ model: 'scripted', tools, input: 'Execute: pwd' });
  const call = response.output.at(-1);
  assert.equal(call.type, 'shell_call');
  assert.deepEqual(call.action.commands, ['pwd']);
  const follow = await client.responses.create({
    model: 'scripted',
    previous_response_id: response.id,
    tools,
    input: [{
      type: 'shell_call_output', call_id: call.call_id,
      output: [{ stdout: '/home/me\n', stderr: '', outcome: { type: 'exit', exit_code: 0 } }],
    }],
  });
  assert.match(follow.output_text, /home\/me/);
});
