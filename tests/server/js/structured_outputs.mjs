// The official OpenAI JS client's structured-output helpers against rill-server: zod schemas
// through zodResponseFormat and the parse helper (whole and streamed) give parsed objects from
// the default model, which writes no JSON unaided; zodFunction tools with tool_choice required
// give parsed arguments from a model that would call another tool (tests/server/toolcall_model.py).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, after, before } from 'node:test';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startServer, SOURCE_DIR } from './server.mjs';

const MODEL = 'rill-shakespeare';
let server, tools_server, client, tools_client, dir;

// Bounded, so a value fits in max_tokens whatever the model prefers.
const Person = z.object({
  name: z.string().max(6),
  age: z.number().int().min(0).max(120),
  role: z.enum(['king', 'fool', 'ghost']),
  alive: z.boolean(),
  lines: z.array(z.enum(['aye', 'nay'])).max(2),
});
const messages = [{ role: 'user', content: 'Describe a character.' }];

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  dir = mkdtempSync(path.join(os.tmpdir(), 'rill_structured_js_'));
  const script = 'import sys; sys.path.insert(0, sys.argv[1]); import toolcall_model as m; ' +
    'm.make_model(sys.argv[2], "qwen2.5", ["<tool", "_call>\\n{\\"name\\": \\"get_weather\\", ", ' +
    '"\\"arguments\\": {\\"city\\": ", "\\"Paris\\"}}\\n</tool_call>"])';
  execFileSync('python3', ['-c', script, path.join(SOURCE_DIR, 'tests/server'), path.join(dir, 'm')],
    { env: { ...process.env, RILL_SOURCE_DIR: SOURCE_DIR } });
  tools_server = await startServer(['--model', path.join(dir, 'm')]);
  tools_client = new OpenAI({ baseURL: `${tools_server.base}/v1`, apiKey: 'unused', maxRetries: 0,
    timeout: 120000 });
});
after(async () => {
  assert.equal(await server.stop(), 0, 'rill-server exits 0 on SIGTERM');
  assert.equal(await tools_server.stop(), 0, 'rill-server exits 0 on SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

test('zodResponseFormat with the parse helper gives parsed objects', async () => {
  for (const [i, temperature] of [0, 1, 1].entries()) {
    const r = await client.beta.chat.completions.parse({
      model: MODEL, messages, temperature, seed: i, max_tokens: 480,
      response_format: zodResponseFormat(Person, 'person'),
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    const parsed = choice.message.parsed;
    assert.deepEqual(Person.parse(parsed), parsed);
    // Keys in the schema's order.
    assert.deepEqual(Object.keys(JSON.parse(choice.message.content)), Object.keys(Person.shape));
  }
});

test('the stream helper assembles a parsed object', async () => {
  const stream = client.beta.chat.completions.stream({
    model: MODEL, messages, max_tokens: 480, temperature: 0,
    response_format: zodResponseFormat(Person, 'person'),
  });
  let chunks = 0;
  stream.on('content.delta', () => { chunks += 1; });
  const final = await stream.finalChatCompletion();
  assert.ok(chunks > 1);
  const parsed = final.choices[0].message.parsed;
  assert.deepEqual(Person.parse(parsed), parsed);
});

test('zodFunction tools with tool_choice required give parsed arguments', async () => {
  const Pick = z.object({ city: z.enum(['Rome', 'Oslo']) });
  const r = await tools_client.beta.chat.completions.parse({
    model: 'm', messages: [{ role: 'user', content: 'Pick a city.' }], max_tokens: 200,
    tools: [zodFunction({ name: 'pick_city', parameters: Pick })], tool_choice: 'required',
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  const call = choice.message.tool_calls[0];
  assert.equal(call.function.name, 'pick_city');
  assert.deepEqual(Pick.parse(call.function.parsed_arguments), call.function.parsed_arguments);
});

test('a schema the server does not support is a 400 naming response_format', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages, max_tokens: 8,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { not: {} } } },
    }),
    (e) => e.status === 400 && e.param === 'response_format' && /not/.test(e.message));
});
