// The official OpenAI JS client with tools against rill-server serving a model that replies with
// a Hermes tool call under Qwen 2.5's template (tests/server/toolcall_model.py): tool_calls parsed,
// whole and streamed (the client's stream helper assembles the deltas), and a role "tool"
// follow-up with the returned call.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, after, before } from 'node:test';
import OpenAI from 'openai';
import { startServer, SOURCE_DIR } from './server.mjs';

let server, client, dir;
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'rill_tools_js_'));
  const script = 'import sys; sys.path.insert(0, sys.argv[1]); import toolcall_model as m; ' +
    'm.make_model(sys.argv[2], "qwen2.5", ["<tool", "_call>\\n{\\"name\\": \\"get_weather\\", ", ' +
    '"\\"arguments\\": {\\"city\\": ", "\\"Paris\\"}}\\n</tool_call>"])';
  execFileSync('python3', ['-c', script, path.join(SOURCE_DIR, 'tests/server'), path.join(dir, 'm')],
    { env: { ...process.env, RILL_SOURCE_DIR: SOURCE_DIR } });
  server = await startServer(['--model', path.join(dir, 'm')]);
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  assert.equal(await server.stop(), 0, 'rill-server exits 0 on SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

test('tool_calls in a whole response', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 32 });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.match(call.id, /^call_[0-9a-f]{32}$/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
});

test('tool_calls streamed, assembled by the client', async () => {
  const stream = client.beta.chat.completions.stream({ model: 'm', messages, tools, max_tokens: 32 });
  const done = await stream.finalChatCompletion();
  const choice = done.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Paris' });
});

test('a role "tool" follow-up renders with the returned call', async () => {
  const first = await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 32 });
  const msg = first.choices[0].message;
  const follow = [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '21 C, sunny' }];
  const r = await client.chat.completions.create({ model: 'm', messages: follow, tools, max_tokens: 32 });
  assert.ok(r.usage.prompt_tokens > first.usage.prompt_tokens);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
});

test('an unknown named tool is a 400 naming tool_choice', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'm', messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (e) => e.status === 400 && e.param === 'tool_choice');
});
