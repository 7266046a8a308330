// What bench:reads measures with: a `jobledger serve` child process and its resident set, timed
// GETs and CLI runs that end as a timeout instead of hanging, and the figures of many samples.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { quantile } from './scratch-database.js';

const { bin } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { bin: { jobledger: string } };
/** The CLI as shipped (package.json "bin"). */
export const CLI = new URL(`../../${bin.jobledger}`, import.meta.url).pathname;

export type Outcome = 'ok' | 'timeout' | 'error';

export interface Sample {
  readonly ms: number;
  readonly bytes: number;
  readonly outcome: Outcome;
  /** What went wrong: the status and body's start, or the exception. */
  readonly error?: string;
}

/** GET `url`, the body read whole; a request not answered within `timeoutMs` is a timeout. */
export const timedGet = async (url: string, timeoutMs: number): Promise<Sample> => {
  const started = performance.now();
  const timeout = AbortSignal.timeout(timeoutMs);
  try {
    const response = await fetch(url, { headers: { accept: 'application/json' }, signal: timeout });
    const body = Buffer.from(await response.arrayBuffer());
    const ms = performance.now() - started;
    return response.ok ? { ms, bytes: body.length, outcome: 'ok' } : { ms, bytes: body.length, outcome: 'error', error: `${response.status} ${body.toString('utf8', 0, 200)}` };
  } catch (error) {
    if (timeout.aborted) return { ms: timeoutMs, bytes: 0, outcome: 'timeout' };
    return { ms: performance.now() - started, bytes: 0, outcome: 'error', error: String((error as Error).cause ?? error) };
  }
};

/** A child's resident set (VmRSS of /proc/<pid>/status), in MB; undefined once it is gone. */
const rssMb = (pid: number): number | undefined => {
  try {
    const kb = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? undefined : Number(kb) / 1024;
  } catch {
    return undefined;
  }
};

export interface Serve {
  readonly url: string;
  readonly pid: number;
  /** Resident set samples (MB), one a second since it listened, each with the phase it was taken in. */
  readonly rss: { readonly phase: string; readonly mb: number }[];
  /**
   * The live heap (MB) after each full collection (V8's Mark-Compact, from node --trace-gc on its
   * stdout), with its phase: what the process holds, where its resident set also counts what V8
   * and the allocator keep for later.
   */
  readonly heap: { readonly phase: string; readonly mb: number }[];
  /**
   * V8's committed heap (MB) after each collection of either kind (the figure in parentheses of
   * node --trace-gc), with its phase: the part of the resident set that V8 sizes, its young
   * generation included, which it grows under a high allocation rate and gives back when idle.
   */
  readonly committed: { readonly phase: string; readonly mb: number }[];
  /** The phase the next RSS samples are taken in. */
  phase: string;
  /** What it wrote on stderr (the last 4 KB). */
  stderr(): string;
  /** Whether it has exited (and how). */
  exited(): string | undefined;
  stop(): Promise<void>;
}

/** `jobledger serve --port 0` on the database at `databaseUrl`, once it says where it listens. */
export const startServe = (databaseUrl: string, { profileDir }: { readonly profileDir?: string | undefined } = {}): Promise<Serve> =>
  new Promise((resolve, reject) => {
    // With profileDir, serve writes a V8 CPU profile there when it stops (node --cpu-prof).
    const profile = profileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`];
    const child: ChildProcess = spawn(process.execPath, [...profile, '--trace-gc', CLI, 'serve', '--port', '0'], {
      env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const heap: Serve['heap'] = [];
    const committed: Serve['committed'] = [];
    let gcLines = '';
    let phase = () => 'idle';
    // "… Mark-Compact 35.8 (56.5) -> 15.1 (23.6) MB, …" or "… Scavenge 30.1 (52.3) -> 22.0 (53.1) MB, …":
    // the heap used (committed) after the collection.
    child.stdout!.on('data', (chunk: Buffer) => {
      const lines = (gcLines + chunk.toString()).split('\n');
      gcLines = lines.pop()!;
      for (const line of lines) {
        const gc = /(Scavenge|Mark-Compact)[^\d]* [\d.]+ \([\d.]+\) -> ([\d.]+) \(([\d.]+)\) MB/.exec(line);
        if (gc === null) continue;
        if (gc[1] === 'Mark-Compact') heap.push({ phase: phase(), mb: Number(gc[2]) });
        committed.push({ phase: phase(), mb: Number(gc[3]) });
      }
    });
    let stderr = '';
    let exit: string | undefined;
    let sampler: NodeJS.Timeout | undefined;
    const started = setTimeout(() => reject(new Error(`serve did not listen within 120 s:\n${stderr}`)), 120_000);
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4096);
      const listening = /jobledger serving (http:\/\/\S+?)\/ /.exec(stderr);
      if (listening === null || sampler !== undefined) return;
      clearTimeout(started);
      const serve: Serve = {
        url: listening[1]!,
        pid: child.pid!,
        rss: [],
        heap,
        committed,
        phase: 'idle',
        stderr: () => stderr,
        exited: () => exit,
        stop: async () => {
          clearInterval(sampler);
          if (exit !== undefined) return;
          const gone = new Promise((done) => child.once('exit', done));
          child.kill('SIGTERM');
          // A request still folding a key keeps serve's close waiting: it is not what is measured.
          const killer = setTimeout(() => child.kill('SIGKILL'), 15_000);
          await gone;
          clearTimeout(killer);
        },
      };
      phase = () => serve.phase;
      sampler = setInterval(() => {
        const mb = rssMb(serve.pid);
        if (mb !== undefined) serve.rss.push({ phase: serve.phase, mb });
      }, 1_000);
      resolve(serve);
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      exit = `exit ${code ?? signal}`;
      clearInterval(sampler);
      clearTimeout(started);
      reject(new Error(`serve exited (${exit}) before listening:\n${stderr}`));
    });
  });

/**
 * One run of the CLI, timed from spawn to exit; killed (a timeout) after `timeoutMs`. `expected`:
 * an exit other than 0 that is the command's answer (a retry of a key with no dead job exits 2,
 * "nothing changed"), when its stderr matches.
 */
export const timedCli = (args: readonly string[], databaseUrl: string, timeoutMs: number, expected?: { readonly code: number; readonly stderr: RegExp }): Promise<Sample> =>
  new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let bytes = 0;
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (chunk: Buffer) => (bytes += chunk.length));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (error) => resolve({ ms: performance.now() - started, bytes, outcome: 'error', error: String(error) }));
    child.on('close', (code) => {
      clearTimeout(timer);
      const ms = performance.now() - started;
      if (timedOut) resolve({ ms: timeoutMs, bytes, outcome: 'timeout' });
      else if (code === 0 || (expected !== undefined && code === expected.code && expected.stderr.test(stderr))) resolve({ ms, bytes, outcome: 'ok' });
      else resolve({ ms, bytes, outcome: 'error', error: `exit ${code}: ${stderr.trim().slice(0, 300)}` });
    });
  });

/** One series of a Prometheus text, e.g. series(text, 'x_bucket', { le: '1' }). */
export const series = (text: string, name: string, labels: Record<string, string> = {}): number | undefined => {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    const m = /^([a-z_0-9]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = m[2] ? m[2].split(',') : [];
    if (have.length === wanted.length && wanted.every((w) => have.includes(w))) return Number(m[3]);
  }
  return undefined;
};

export interface Figures {
  readonly n: number;
  readonly timeouts: number;
  readonly errors: number;
  /** Over every sample, a timeout counted as its timeout (so at least that). */
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly maxBytes: number;
  readonly medianBytes: number;
  /** The first error seen, to say what went wrong. */
  readonly firstError?: string;
}

export const figuresOf = (samples: readonly Sample[]): Figures => {
  const ms = samples.map((s) => s.ms).sort((a, b) => a - b);
  const bytes = samples.filter((s) => s.outcome === 'ok').map((s) => s.bytes).sort((a, b) => a - b);
  const firstError = samples.find((s) => s.outcome === 'error')?.error;
  return {
    n: samples.length,
    timeouts: samples.filter((s) => s.outcome === 'timeout').length,
    errors: samples.filter((s) => s.outcome === 'error').length,
    p50: quantile(ms, 0.5),
    p99: quantile(ms, 0.99),
    max: ms.at(-1) ?? NaN,
    maxBytes: bytes.at(-1) ?? NaN,
    medianBytes: quantile(bytes, 0.5),
    ...(firstError === undefined ? {} : { firstError }),
  };
};
