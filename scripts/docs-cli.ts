import { mkdirSync, writeFileSync } from 'node:fs';
import { renderCliReference } from './cli-reference.js';

// `npm run docs:cli`: writes docs/cli.md (from dist/scripts, two directories below the repository).
const target = new URL('../../docs/cli.md', import.meta.url);
mkdirSync(new URL('.', target), { recursive: true });
writeFileSync(target, await renderCliReference());
console.log(`wrote ${target.pathname}`);
