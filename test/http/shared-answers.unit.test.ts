import { describe, expect, it, vi } from 'vitest';
import { SharedAnswers } from '../../src/adapters/http/shared-answers.js';

describe('SharedAnswers', () => {
  it('reads once for the requests under a tag, those waiting on a read included', async () => {
    const shared = new SharedAnswers();
    let finish!: (v: string) => void;
    const read = vi.fn(() => new Promise<string>((resolve) => (finish = resolve)));
    const waiting = [shared.of('t1', read), shared.of('t1', read)];
    finish('a');
    expect(await Promise.all(waiting)).toEqual(['a', 'a']);
    expect(await shared.of('t1', read)).toBe('a');
    expect(read).toHaveBeenCalledTimes(1);
    expect(await shared.of('t2', async () => 'b')).toBe('b');
  });

  it('a failed read is not kept: the next request under its tag reads again', async () => {
    const shared = new SharedAnswers();
    await expect(shared.of('t', () => Promise.reject(new Error('read budget spent')))).rejects.toThrow('read budget spent');
    expect(await shared.of('t', async () => 'then read')).toBe('then read');
  });

  it('keeps the `max` most recently asked tags', async () => {
    const shared = new SharedAnswers(2);
    await shared.of('a', async () => 1);
    await shared.of('b', async () => 2);
    await shared.of('a', async () => -1); // asked again: b is now the oldest
    await shared.of('c', async () => 3);
    expect(await shared.of('a', async () => -1)).toBe(1);
    expect(await shared.of('b', async () => 20)).toBe(20);
  });
});
