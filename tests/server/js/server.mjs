// Starts the real rill-server on ephemeral loopback ports (the ports come from its
// machine-readable "listening" line) and waits for /health.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

export const SOURCE_DIR = process.env.RILL_SOURCE_DIR ?? path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');
const SERVER = process.env.RILL_SERVER ?? path.join(SOURCE_DIR, 'build/server/rill-server');

export async function startServer(extra = []) {
  const proc = spawn(SERVER, ['--host', '127.0.0.1', '--http-port', '0', '--grpc-port', '0', '--device', 'cpu',
    '--log-level', 'warn', ...extra], { cwd: SOURCE_DIR, stdio: ['ignore', 'pipe', 'inherit'] });
  const ports = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('rill-server did not print its ports')), 120000);
    proc.on('exit', (code) => reject(new Error(`rill-server exited with ${code}`)));
    readline.createInterface({ input: proc.stdout }).on('line', (line) => {
      try {
        const ev = JSON.parse(line);
        if (ev.event === 'listening') { clearTimeout(timer); resolve(ev); }
      } catch { /* not ours */ }
    });
  });
  const base = `http://127.0.0.1:${ports.http_port}`;
  for (let i = 0; ; i++) {
    try { if ((await fetch(`${base}/health`)).status === 200) break; } catch { /* not yet */ }
    if (i > 1200) throw new Error('rill-server not healthy');
    await new Promise((r) => setTimeout(r, 100));
  }
  const stop = () => new Promise((resolve) => {
    if (proc.exitCode !== null) return resolve(proc.exitCode);
    proc.removeAllListeners('exit');
    proc.on('exit', (code) => resolve(code));
    proc.kill('SIGTERM');
  });
  return { proc, base, ports, stop };
}

export function goldenCase() {
  return JSON.parse(readFileSync(path.join(SOURCE_DIR, 'tests/golden/default_model.json'), 'utf8')).cases[0];
}

export function threadCount(pid) {
  try { return readFileSync(`/proc/${pid}/status`, 'utf8').match(/Threads:\s+(\d+)/)[1] | 0; } catch { return -1; }
}
