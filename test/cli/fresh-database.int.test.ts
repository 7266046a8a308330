import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { runCliInProcess } from './in-process.js';

// The reading commands on a database nobody has opened yet: `keys` creates the schema (as every
// command but `workers` does) and lists nothing, where it must not fail on a missing table.

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe('a database with no schema yet', () => {
  it('keys migrates it and lists no key', async () => {
    const { code, stdout, stderr } = await runCliInProcess(db.url, ['keys', '--json']);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(stdout)).toMatchObject({ matched: 0, keys: [], totals: { keys: 0 } });
  });
});
