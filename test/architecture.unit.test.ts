import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// The inward rule of the README and DESIGN.md, checked on every import of the source (static,
// re-exports and dynamic import(), as TypeScript's own pre-processor reads them): the domain is
// pure and imports nothing of ours outside it, nor any package but its codecs; commands and
// projections never reach into the adapters. A new import that breaks it fails here, naming the
// file and what it imports.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SRC = join(ROOT, 'src');

/** The packages the domain may use: its codecs and Either. Everything else (node:*, pg, …) is I/O or an adapter's. */
const DOMAIN_PACKAGES = ['fp-ts', 'io-ts'];

const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });

interface Import {
  /** The importing file, relative to the project root. */
  readonly from: string;
  /** As written in the source. */
  readonly specifier: string;
  /** The file it names, relative to src/ (for a relative import), else null (a package). */
  readonly target: string | null;
}

const importsOf = (file: string, text = readFileSync(file, 'utf8')): Import[] =>
  ts.preProcessFile(text, true, true).importedFiles.map(({ fileName: specifier }) => ({
    from: relative(ROOT, file),
    specifier,
    target: specifier.startsWith('.') ? relative(SRC, resolve(dirname(file), specifier)).replace(/\.js$/, '.ts') : null,
  }));

const layerOf = (pathUnderSrc: string): string => pathUnderSrc.split('/')[0]!;
const packageOf = (specifier: string): string => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!);

/** What a file of `layer` must not import: a description of the breach, or null when it is allowed. */
const breach = (layer: string, imp: Import): string | null => {
  if (layer === 'domain') {
    if (imp.target === null) return DOMAIN_PACKAGES.includes(packageOf(imp.specifier)) ? null : `the domain imports the package ${imp.specifier}`;
    return layerOf(imp.target) === 'domain' ? null : `the domain imports src/${imp.target}`;
  }
  if ((layer === 'commands' || layer === 'projections') && imp.target !== null && layerOf(imp.target) === 'adapters') return `src/${layer} imports src/${imp.target}`;
  return null;
};

const breachesIn = (layer: string): string[] =>
  sourceFiles(join(SRC, layer)).flatMap((file) =>
    importsOf(file).flatMap((imp) => {
      const what = breach(layer, imp);
      return what === null ? [] : [`${imp.from}: ${what} ('${imp.specifier}')`];
    }),
  );

describe('dependencies point inward', () => {
  it('src/domain imports only src/domain, fp-ts and io-ts', () => {
    expect(breachesIn('domain')).toEqual([]);
  });

  it('src/commands and src/projections never import src/adapters', () => {
    expect([...breachesIn('commands'), ...breachesIn('projections')]).toEqual([]);
  });

  it('the check sees every kind of import, and flags what breaks the rule (it is not vacuous)', () => {
    const probe = importsOf(join(SRC, 'domain', 'probe.ts'), `import { a } from '../adapters/ledger.js';\nexport * from './events.js';\nconst m = await import('pg');\nimport 'node:fs';`);
    expect(probe.map((i) => i.specifier)).toEqual(['../adapters/ledger.js', './events.js', 'pg', 'node:fs']);
    expect(probe.map((i) => breach('domain', i))).toEqual(['the domain imports src/adapters/ledger.ts', null, 'the domain imports the package pg', 'the domain imports the package node:fs']);
    expect(breach('projections', { from: 'p', specifier: '../adapters/x.js', target: 'adapters/x.ts' })).toBe('src/projections imports src/adapters/x.ts');
    expect(breach('commands', { from: 'c', specifier: '../domain/x.js', target: 'domain/x.ts' })).toBeNull();
    // The real source is read: it has files in each layer, and imports.
    for (const layer of ['domain', 'commands', 'projections']) expect(sourceFiles(join(SRC, layer)).flatMap((file) => importsOf(file)).length).toBeGreaterThan(5);
  });
});

/**
 * The import cycles of a graph (file → the files it imports): each strongly connected part of more
 * than one file, its files sorted, found by Tarjan's algorithm. Type-only imports count: a cycle
 * through types still ties the files' meaning together (issue 22: the migrations imported their type
 * from the list that imports them, and the key writer's parts the writer).
 */
const cyclesOf = (graph: ReadonlyMap<string, readonly string[]>): string[][] => {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const part: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      part.push(w);
    } while (w !== v);
    if (part.length > 1) cycles.push(part.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return cycles;
};

describe('no import cycles', () => {
  it('no file of src imports, through any chain of imports (type-only ones too), a file that imports it', () => {
    const graph = new Map(
      sourceFiles(SRC).map((file) => [
        relative(SRC, file),
        importsOf(file).flatMap((i) => (i.target === null ? [] : [i.target])),
      ]),
    );
    expect(graph.size).toBeGreaterThan(100);
    expect(cyclesOf(graph)).toEqual([]);
  });

  it('the cycle finder finds a cycle of two, of three and one through a longer chain, and nothing in a tree', () => {
    const g = (edges: Record<string, string[]>) => new Map(Object.entries(edges));
    expect(cyclesOf(g({ a: ['b'], b: ['a'] }))).toEqual([['a', 'b']]);
    expect(cyclesOf(g({ a: ['b'], b: ['c'], c: ['a'], d: ['a'] }))).toEqual([['a', 'b', 'c']]);
    expect(cyclesOf(g({ m: ['n', 'x'], n: ['o'], o: ['p'], p: ['m'], x: [] }))).toEqual([['m', 'n', 'o', 'p']]);
    expect(cyclesOf(g({ a: ['b', 'c'], b: ['c'], c: [] }))).toEqual([]);
  });
});
