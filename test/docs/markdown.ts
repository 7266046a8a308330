import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

// What the documentation checks read of a Markdown file: its fenced code blocks, its links and
// its headings' anchors, each with the line it is on (1-based), so a failure names file:line.

export interface Block {
  /** The info string's first word: sh, console, js, ts, json, http, text, … ('' when none). */
  readonly lang: string;
  /** The line of the opening fence. */
  readonly line: number;
  readonly code: string;
}

export interface Link {
  readonly target: string;
  readonly line: number;
}

export interface Markdown {
  /** Relative to the repository, e.g. docs/guide.md. */
  readonly path: string;
  readonly text: string;
  readonly blocks: Block[];
  readonly links: Link[];
  /** The anchors a link may name: each heading's GitHub slug, and explicit `<a id>`/`<a name>`. */
  readonly anchors: Set<string>;
}

/** README.md and every docs/**\/*.md that exists. */
export const documentationFiles = (root: string): string[] => {
  const walk = (dir: string): string[] => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return [];
    }
    return entries.flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : []));
  };
  return ['README.md', ...walk(join(root, 'docs')).map((f) => relative(root, f)).sort()];
};

/**
 * A heading's anchor as GitHub makes it (github-slugger): the text as rendered (code spans, links
 * and emphasis markers dropped), lowercased, everything but letters, marks, digits, `_`, `-` and
 * spaces removed, spaces made `-`.
 */
export const githubSlug = (heading: string): string =>
  heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/`/g, '')
    .replace(/(\*\*|__|\*)/g, '')
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');

/** A line with its code spans taken out: a link written in `code` is not a link. */
const withoutCodeSpans = (line: string): string => line.replace(/(`+)[\s\S]*?\1/g, '');

export const parseMarkdown = (root: string, path: string): Markdown => {
  const text = readFileSync(join(root, path), 'utf8');
  const lines = text.split('\n');
  const blocks: Block[] = [];
  const links: Link[] = [];
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let open: { fence: string; lang: string; line: number; body: string[] } | null = null;
  lines.forEach((line, i) => {
    const n = i + 1;
    const fence = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/.exec(line);
    if (open !== null) {
      if (fence !== null && fence[2]!.startsWith(open.fence) && line.trim() === fence[2]) {
        blocks.push({ lang: open.lang, line: open.line, code: open.body.join('\n') + '\n' });
        open = null;
      } else open.body.push(line);
      return;
    }
    if (fence !== null) {
      open = { fence: fence[2]!, lang: fence[3]!.toLowerCase(), line: n, body: [] };
      return;
    }
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading !== null) {
      // A repeated heading's anchor gets -1, -2, … as on GitHub.
      const slug = githubSlug(heading[1]!);
      const count = seen.get(slug) ?? 0;
      seen.set(slug, count + 1);
      anchors.add(count === 0 ? slug : `${slug}-${count}`);
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
    const plain = withoutCodeSpans(line);
    for (const m of plain.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) links.push({ target: m[1]!, line: n });
    const reference = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/.exec(plain);
    if (reference !== null) links.push({ target: reference[1]!, line: n });
    for (const m of plain.matchAll(/<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"/g)) links.push({ target: m[1]!, line: n });
  });
  if (open !== null) blocks.push({ lang: (open as { lang: string }).lang, line: (open as { line: number }).line, code: '' });
  return { path, text, blocks, links, anchors };
};

/**
 * Shell words of a command line, quotes and backslashes resolved; `&&`, `||`, `|`, `;` and `&`
 * outside quotes are words of their own, so a line splits into its commands.
 */
export const shellWords = (line: string): string[] => {
  const words: string[] = [];
  let word: string | null = null;
  const push = () => {
    if (word !== null) words.push(word);
    word = null;
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      word = (word ?? '') + line.slice(i + 1, end < 0 ? undefined : end);
      i = end < 0 ? line.length : end;
    } else if (c === '"') {
      let j = i + 1;
      let s = '';
      for (; j < line.length && line[j] !== '"'; j++) s += line[j] === '\\' && j + 1 < line.length ? line[++j] : line[j];
      word = (word ?? '') + s;
      i = j;
    } else if (c === '\\' && i + 1 < line.length) word = (word ?? '') + line[++i];
    else if (/\s/.test(c)) push();
    else if ('&|;'.includes(c)) {
      push();
      const two = line.slice(i, i + 2);
      words.push(two === '&&' || two === '||' ? two : c);
      if (two === '&&' || two === '||') i++;
    } else if (c === '#' && word === null) break;
    else word = (word ?? '') + c;
  }
  push();
  return words;
};

/** The commands of a code block, each with its line: ```sh every line but comments; ```console the `$ ` lines. Lines ending in `\` continue. */
export const commandsOf = (block: Block): { line: number; command: string }[] => {
  const out: { line: number; command: string }[] = [];
  const lines = block.code.split('\n');
  for (let i = 0; i < lines.length; i++) {
    let text = lines[i]!;
    const line = block.line + 1 + i;
    if (block.lang === 'console') {
      if (!text.startsWith('$ ')) continue;
      text = text.slice(2);
    } else if (text.trim() === '' || text.trimStart().startsWith('#')) continue;
    while (text.endsWith('\\') && i + 1 < lines.length) text = `${text.slice(0, -1)} ${lines[++i]!}`;
    out.push({ line, command: text });
  }
  return out;
};

/** Each simple command of a command line: its words between &&, ||, |, ; and &. */
export const simpleCommands = (command: string): string[][] => {
  const out: string[][] = [[]];
  for (const word of shellWords(command)) {
    if (['&&', '||', '|', ';', '&'].includes(word)) out.push([]);
    else out[out.length - 1]!.push(word);
  }
  return out.filter((c) => c.length > 0);
};
