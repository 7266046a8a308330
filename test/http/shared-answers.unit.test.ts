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
  describe('fresh answers (freshMs)', () => {
    const clocked = () => {
      let now = 0;
      return { shared: new SharedAnswers(32, 1_000, () => now), at: (t: number) => (now = t) };
    };

    it('the newest answer to a question answers it, under its own tag, while younger than freshMs', async () => {
      const { shared, at } = clocked();
      expect(shared.fresh('keys')).toBeUndefined();
      await shared.of('t1', async () => 'a', 'keys');
      at(999);
      expect(shared.fresh('keys')).toMatchObject({ tag: 't1' });
      expect(await shared.fresh('keys')!.answer).toBe('a');
      // Its age counts from when its read began.
      at(1_000);
      expect(shared.fresh('keys')).toBeUndefined();
      await shared.of('t2', async () => 'b', 'keys');
      expect(shared.fresh('keys')).toMatchObject({ tag: 't2' });
      expect(shared.fresh('other')).toBeUndefined();
    });

    it('an answer still being read, or that failed, is not fresh', async () => {
      const { shared } = clocked();
      let finish!: (v: string) => void;
      const reading = shared.of('t', () => new Promise<string>((resolve) => (finish = resolve)), 'keys');
      expect(shared.fresh('keys')).toBeUndefined();
      finish('a');
      await reading;
      expect(shared.fresh('keys')).toMatchObject({ tag: 't' });
      await expect(shared.of('t-bad', () => Promise.reject(new Error('no')), 'bad')).rejects.toThrow('no');
      await Promise.resolve();
      expect(shared.fresh('bad')).toBeUndefined();
    });

    it('forget(): nothing read before, or while, a write ran answers as fresh', async () => {
      const { shared } = clocked();
      await shared.of('t1', async () => 'before', 'keys');
      let finish!: (v: string) => void;
      const during = shared.of('t2', () => new Promise<string>((resolve) => (finish = resolve)), 'detail');
      shared.forget();
      expect(shared.fresh('keys')).toBeUndefined();
      finish('during');
      await during;
      expect(shared.fresh('detail')).toBeUndefined();
      await shared.of('t3', async () => 'after', 'keys');
      expect(shared.fresh('keys')).toMatchObject({ tag: 't3' });
    });

    it('freshMs 0 (the default) keeps nothing fresh', async () => {
      const shared = new SharedAnswers();
      await shared.of('t', async () => 'a', 'keys');
      expect(shared.fresh('keys')).toBeUndefined();
    });
  });
});
