// Sessions through the official OpenAI JS client: the session endpoints through its generic
// request methods, turns through chat.completions.create with the extra "session_id" field
// (streamed), a concurrent turn as the client's ConflictError (409), and NotFoundError (404)
// once the session is deleted.
import assert from 'node:assert/strict';
import { test, after, before } from 'node:test';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

let server, client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => { assert.equal(await server.stop(), 0, 'rill-server exits 0 on SIGTERM'); });

const turn = (id, content, extra = {}) => client.chat.completions.create({
  model: 'rill-shakespeare', session_id: id, messages: [{ role: 'user', content }], stream: true,
  stream_options: { include_usage: true }, ...extra,
});

async function drain(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

test('a chat session: streamed turns, a conflicting turn, delete', async () => {
  const s = await client.post('/sessions', {
    body: { id: 'js-1', cache: { policy: 'streaming', n_sink: 4, window: 32 }, temperature: 0, max_tokens: 8 },
  });
  assert.equal(s.id, 'js-1');
  assert.equal(s.object, 'session');
  let seen = 0;
  for (const content of ['Good morrow, cousin.', 'What news?', 'Speak on.']) {
    const r = await drain(await turn('js-1', content, { ignore_eos: true }));
    assert.equal(r.finish, 'length');
    assert.equal(r.usage.completion_tokens, 8);
    const info = await client.get('/sessions/js-1');
    assert.ok(info.tokens_seen > seen);
    seen = info.tokens_seen;
  }
  assert.ok((await client.get('/sessions/js-1')).tokens_evicted > 0);

  const long = await turn('js-1', 'At length.', { max_tokens: 100000, ignore_eos: true });
  const it = long[Symbol.asyncIterator]();
  await it.next();  // the turn runs
  await assert.rejects(turn('js-1', 'Me too.'), (e) => e instanceof OpenAI.ConflictError && e.status === 409);
  long.controller.abort();

  const gone = await client.delete('/sessions/js-1');
  assert.deepEqual(gone, { id: 'js-1', object: 'session', deleted: true });
  await assert.rejects(client.get('/sessions/js-1'), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(turn('js-1', 'Anyone?'), (e) => e instanceof OpenAI.NotFoundError);
});
