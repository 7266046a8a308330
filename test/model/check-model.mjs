#!/usr/bin/env node
// npm run check:model -- --runs N [--seed S] [--operations K]: N seeded runs of the model checker
// (test/model/model.int.test.ts), against DATABASE_URL when set (else the suite's own server).
// vitest prints each failing seed's violations and run log (a thin seed, one whose inputs reached little,
// is said and not failed); the last line sums it up:
// "model: N runs from seed S, F failed (seeds …) in T s".
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '50' }, seed: { type: 'string' }, operations: { type: 'string', default: '90' } },
});
const runs = Number(values.runs);
const seed = values.seed === undefined ? Math.floor(Math.random() * 1_000_000) : Number(values.seed);
if (!Number.isSafeInteger(runs) || runs < 1 || !Number.isSafeInteger(seed) || !Number.isSafeInteger(Number(values.operations))) {
  console.error('usage: npm run check:model -- --runs N [--seed S] [--operations K] (whole numbers)');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'jobledger-model-'));
const report = join(dir, 'report.json');
const started = Date.now();
const child = spawn('npx', ['vitest', 'run', '--project', 'int', 'test/model/model.int.test.ts', '--reporter=default', '--reporter=json', `--outputFile=${report}`], {
  env: { ...process.env, JOBLEDGER_MODEL_RUNS: String(runs), JOBLEDGER_MODEL_SEED: String(seed), JOBLEDGER_MODEL_OPERATIONS: values.operations },
  stdio: 'inherit',
});
child.on('exit', (code) => {
  let failed = [];
  let ran = true;
  try {
    const results = JSON.parse(readFileSync(report, 'utf8')).testResults.flatMap((f) => f.assertionResults);
    failed = results.filter((r) => r.status === 'failed').map((r) => /seed (\d+)/.exec(r.title)?.[1] ?? r.title);
  } catch (error) {
    console.error(`no report from vitest: ${error.message}`);
    ran = false;
  }
  rmSync(dir, { recursive: true, force: true });
  const seconds = Math.round((Date.now() - started) / 1000);
  // Without vitest's report nothing is known: saying "0 failed" here would be a green tick for a run that never happened.
  console.log(
    ran
      ? `\nmodel: ${runs} runs from seed ${seed}, ${failed.length} failed${failed.length > 0 ? ` (seeds ${failed.join(', ')})` : ''} in ${seconds} s`
      : `\nmodel: vitest did not run (exit ${code}); no seed was checked`,
  );
  process.exit(ran ? (code ?? 1) : 2);
});
