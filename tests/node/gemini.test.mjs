// Google's Gemini API through the official `@google/genai` SDK, its base URL
// shellgate's, over a scripted Chat Completions upstream (a test fixture):
// `codeExecution` runs the model's Python in a shellgate container.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { GoogleGenAI } from '@google/genai';

import { startScriptedUpstream, startServer } from './harness.mjs';

const KEY = 'sk-node-gemini-tests';

let server;
let upstream;

// The script: "Interpret: CODE" with the code tool offered → a call of it;
// a tool result → "Done: <result>"; anything else → a greeting.
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: `Done: ${last.content}` };
  const text = typeof last.content === 'string' ? last.content : '';
  if (text.startsWith('Interpret: ') && tools.includes('code_execution')) {
    return { tool: ['code_execution', { code: text.slice('Interpret: '.length) }] };
  }
  return { text: 'Hello from the scripted model.' };
}

before(async () => {
  upstream = await startScriptedUpstream(decide);
  server = await startServer({
    key: KEY, name: 'gemini', env: { SHELLGATE_UPSTREAM_URL: upstream.url },
  });
});

after(async () => {
  await server.stop();
  upstream.close();
});

test('gemini: generateContent runs codeExecution in a shellgate container', async () => {
  const ai = new GoogleGenAI({
    apiKey: KEY,
    httpOptions: { baseUrl: server.baseURL.replace(/\/v1$/, ''), apiVersion: 'v1beta' },
  });
  const response = await ai.models.generateContent({
    model: 'scripted',
    contents: 'Interpret: print(6 * 7)',
    config: { tools: [{ codeExecution: {} }] },
  });
  const [code, result, answer] = response.candidates[0].content.parts;
  assert.equal(code.executableCode.code, 'print(6 * 7)');
  assert.equal(code.executableCode.language, 'PYTHON');
  assert.equal(result.codeExecutionResult.outcome, 'OUTCOME_OK');
  assert.equal(result.codeExecutionResult.output, '42\n');
  assert.equal(result.codeExecutionResult.id, code.executableCode.id);
  assert.equal(answer.text, 'Done: OUTCOME_OK\n42\n');
  assert.ok(response.usageMetadata.totalTokenCount > 0);
});
