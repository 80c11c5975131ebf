// 1,000 concurrent streaming HTTP clients (the OpenAI JS client) against the CPU server: every
// stream finishes without error, and the server's thread count stays bounded (a few Asio threads
// serve every connection; no thread per connection).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { startServer, threadCount } from './server.mjs';

const CLIENTS = Number(process.env.RILL_CONCURRENT_CLIENTS ?? 1000);

test(`${CLIENTS} concurrent streams`, { timeout: 240000 }, async () => {
  const server = await startServer(['--max-queued-requests', String(CLIENTS + 100)]);
  try {
    const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 200000 });
    const idleThreads = threadCount(server.proc.pid);
    let maxThreads = idleThreads;
    const sampler = setInterval(() => { maxThreads = Math.max(maxThreads, threadCount(server.proc.pid)); }, 50);
    const started = Date.now();
    const results = await Promise.allSettled(Array.from({ length: CLIENTS }, async (_, i) => {
      const stream = await client.completions.create({
        model: 'rill-shakespeare', prompt: `ROMEO ${i}:`, max_tokens: 4, temperature: 0, ignore_eos: true,
        stream: true,
      });
      let chunks = 0;
      let finish = null;
      for await (const chunk of stream) {
        chunks += 1;
        if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
      }
      assert.equal(finish, 'length');
      return chunks;
    }));
    clearInterval(sampler);
    const failed = results.filter((r) => r.status === 'rejected');
    console.log(`${CLIENTS} streams in ${(Date.now() - started) / 1000} s; threads idle ${idleThreads}, max ${maxThreads}; ${failed.length} failed`);
    assert.equal(failed.length, 0, failed.slice(0, 3).map((r) => String(r.reason)).join('\n'));
    assert.ok(maxThreads <= idleThreads + 4, `server threads grew from ${idleThreads} to ${maxThreads}`);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
