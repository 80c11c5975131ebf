// The official OpenAI JS client against rill-server: completions and chat, streaming and not.
// Greedy ids equal the transformers golden ids (tests/golden/default_model.json) and the text
// equals their detokenization; errors arrive as the client's APIError with OpenAI's shape.
import assert from 'node:assert/strict';
import { test, after, before } from 'node:test';
import OpenAI from 'openai';
import { startServer, goldenCase } from './server.mjs';

let server, client;
const golden = goldenCase();
const N = 24;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => { assert.equal(await server.stop(), 0, 'rill-server exits 0 on SIGTERM'); });

async function detokenize(ids) {
  const r = await fetch(`${server.base}/detokenize`, { method: 'POST', body: JSON.stringify({ tokens: ids }) });
  return (await r.json()).prompt;
}

test('models list names the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['rill-shakespeare']);
});

test('completion (non-streaming) equals the golden greedy output', async () => {
  const r = await client.completions.create({
    model: 'rill-shakespeare', prompt: golden.prompt, max_tokens: N, temperature: 0, ignore_eos: true,
    return_token_ids: true,
  });
  assert.deepEqual(r.choices[0].token_ids, golden.greedy_ids.slice(0, N));
  assert.equal(r.choices[0].text, await detokenize(golden.greedy_ids.slice(0, N)));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, golden.prompt_ids.length);
  assert.equal(r.usage.completion_tokens, N);
  assert.equal(r.object, 'text_completion');
});

test('completion (streaming) equals the golden greedy output, usage last', async () => {
  const stream = await client.completions.create({
    model: 'rill-shakespeare', prompt: golden.prompt_ids, max_tokens: N, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true }, return_token_ids: true,
  });
  let text = '';
  const ids = [];
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      ids.push(...(c.token_ids ?? []));
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.deepEqual(ids, golden.greedy_ids.slice(0, N));
  assert.equal(text, await detokenize(golden.greedy_ids.slice(0, N)));
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, N);
  assert.equal(usage.total_tokens, N + golden.prompt_ids.length);
});

test('completion logprobs have the OpenAI shape', async () => {
  const r = await client.completions.create({
    model: 'rill-shakespeare', prompt: golden.prompt, max_tokens: 4, temperature: 0, logprobs: 2,
  });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.token_logprobs.length, 4);
  assert.equal(lp.top_logprobs.length, 4);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.ok(lp.token_logprobs.every((x) => x <= 0));
});

test('chat (non-streaming and streaming) agree', async () => {
  const messages = [{ role: 'system', content: 'A play.' }, { role: 'user', content: 'Speak, ROMEO.' }];
  const r = await client.chat.completions.create({
    model: 'rill-shakespeare', messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 1,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  assert.ok(r.choices[0].logprobs.content.length > 0);
  assert.equal(r.choices[0].logprobs.content[0].top_logprobs.length, 1);
  const stream = await client.chat.completions.create({
    model: 'rill-shakespeare', messages, max_tokens: 12, temperature: 0, stream: true,
  });
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      text += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, r.choices[0].message.content);
  assert.equal(r.usage.completion_tokens > 0, true);
});

test('stop strings end the text before the match', async () => {
  const full = await detokenize(golden.greedy_ids.slice(0, 30));
  const stop = full.slice(12, 16);
  const r = await client.completions.create({
    model: 'rill-shakespeare', prompt: golden.prompt, max_tokens: 30, temperature: 0, stop: [stop],
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
});

test('errors reach the client as OpenAI errors', async () => {
  await assert.rejects(
    client.completions.create({ model: 'rill-shakespeare', prompt: 'a', max_tokens: -5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'max_tokens');
  await assert.rejects(
    client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'model');
  await assert.rejects(
    client.completions.create({ model: 'rill-shakespeare', prompt: 'a', n: 3 }),
    (e) => e.status === 400 && e.param === 'n');
});
