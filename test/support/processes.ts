import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { expect } from 'vitest';

// Fixture processes (test/fixtures/*-process.mjs) that race each other: each is started with its
// config as JSON (argv[2]), says {"ready":true} once its ledger is open, waits for a line on stdin
// (the barrier: all are let go at once), and ends with {"done":true,"stats":...} (or
// {"done":false,"error":...}).

/** Runs one fixture process per config, lets them go at once, and returns each one's stats. */
export const runProcesses = async <Stats>(script: string, configs: readonly object[]): Promise<Stats[]> => {
  const children = configs.map((config) => spawn(process.execPath, [script, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] }));
  try {
    const stderr = children.map(() => [] as string[]);
    const lines = children.map((child, i) => {
      child.stderr.on('data', (chunk: Buffer) => stderr[i]!.push(chunk.toString()));
      const queue: string[] = [];
      const waiting: ((line: string) => void)[] = [];
      createInterface({ input: child.stdout }).on('line', (line) => (waiting.length > 0 ? waiting.shift()!(line) : queue.push(line)));
      const exited = new Promise<never>((_, reject) =>
        child.on('exit', (code) => reject(new Error(`process ${i} exited (${code}) early: ${stderr[i]!.join('')}`))),
      );
      return () => Promise.race([queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise<string>((r) => waiting.push(r)), exited]);
    });
    const ready = await Promise.all(lines.map((next) => next()));
    expect(ready.map((l) => JSON.parse(l))).toEqual(configs.map(() => ({ ready: true })));
    for (const child of children) child.stdin.write('go\n');
    const done = await Promise.all(lines.map((next) => next()));
    return done.map((line, i) => {
      const message = JSON.parse(line) as { done: boolean; error?: string; stats: Stats };
      if (!message.done) throw new Error(`process ${i} failed: ${message.error}\n${stderr[i]!.join('')}`);
      return message.stats;
    });
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  }
};
