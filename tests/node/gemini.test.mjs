// Google's Gemini API through the official `@google/genai` SDK, its base URL
// shellgate's, over a scripted Chat Completions upstream (a test fixture):
// `codeExecution` runs the model's Python in a shellgate container (its
// output, and a figure as an inline PNG); a function call goes to the
// client and its response back to the model; a stream comes as the SDK's
// chunks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { GoogleGenAI } from '@google/genai';

import { startScriptedUpstream, startServer } from './harness.mjs';

const KEY = 'sk-node-gemini-tests';

let server;
let upstream;

// The script: "Interpret: CODE" with the code tool offered → a call of it;
// "Call NAME: JSON" → a call of the function NAME; a tool result →
// "Done: <result>"; anything else → a greeting.
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: `Done: ${last.content}` };
  const text = typeof last.content === 'string' ? last.content : '';
  if (text.startsWith('Interpret: ') && tools.includes('code_execution')) {
    return { tool: ['code_execution', { code: text.slice('Interpret: '.length) }] };
  }
  if (text.startsWith('Call ')) {
    const [name, args] = text.slice('Call '.length).split(/:(.*)/s);
    return { tool: [name.trim(), JSON.parse(args)] };
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

test('gemini: a figure the code draws comes back as inlineData image/png', async () => {
  const ai = new GoogleGenAI({
    apiKey: KEY,
    httpOptions: { baseUrl: server.baseURL.replace(/\/v1$/, ''), apiVersion: 'v1beta' },
  });
  const code = 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()';
  const response = await ai.models.generateContent({
    model: 'scripted',
    contents: `Interpret: ${code}`,
    config: { tools: [{ codeExecution: {} }] },
  });
  const parts = response.candidates[0].content.parts;
  const seen = JSON.stringify(parts.map((part) => Object.keys(part)));
  const images = parts.filter((part) => part.inlineData).map((part) => part.inlineData);
  assert.equal(images.length, 1, seen);
  assert.equal(images[0].mimeType, 'image/png', seen);
  // The SDK keeps the bytes base64, as Google sends them.
  const png = Buffer.from(images[0].data, 'base64');
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], seen);
  const [result] = parts.filter((part) => part.codeExecutionResult);
  assert.equal(result.codeExecutionResult.outcome, 'OUTCOME_OK', seen);
});

test('gemini: a function call goes to the client and its response back to the model', async () => {
  const ai = new GoogleGenAI({
    apiKey: KEY,
    httpOptions: { baseUrl: server.baseURL.replace(/\/v1$/, ''), apiVersion: 'v1beta' },
  });
  const config = {
    tools: [{
      functionDeclarations: [{
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: { type: 'OBJECT', properties: { city: { type: 'STRING' } } },
      }],
    }],
  };
  const asked = { role: 'user', parts: [{ text: 'Call get_weather: {"city": "Oslo"}' }] };
  const first = await ai.models.generateContent({ model: 'scripted', contents: [asked], config });
  const [call] = first.functionCalls;
  assert.deepEqual([call.name, call.args], ['get_weather', { city: 'Oslo' }]);
  assert.ok(call.id);
  const answer = {
    role: 'user',
    parts: [{ functionResponse: { id: call.id, name: 'get_weather', response: { temperature: 3 } } }],
  };
  const second = await ai.models.generateContent({
    model: 'scripted', contents: [asked, first.candidates[0].content, answer], config,
  });
  assert.equal(second.text, 'Done: {"temperature":3}');
});

test('gemini: a stream comes as the SDK\'s chunks, the last with the finish and the usage', async () => {
  const ai = new GoogleGenAI({
    apiKey: KEY,
    httpOptions: { baseUrl: server.baseURL.replace(/\/v1$/, ''), apiVersion: 'v1beta' },
  });
  const chunks = [];
  for await (const chunk of await ai.models.generateContentStream({ model: 'scripted', contents: 'hi' })) {
    chunks.push(chunk);
  }
  assert.equal(chunks.map((chunk) => chunk.text ?? '').join(''), 'Hello from the scripted model.');
  const last = chunks[chunks.length - 1];
  assert.equal(last.candidates[0].finishReason, 'STOP');
  assert.ok(last.usageMetadata.totalTokenCount > 0);
});
