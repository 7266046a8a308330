import { userInfo } from 'node:os';
import type { Command } from 'commander';

// What every operator action (release, discard, set-limit, cancel) shares: who did it, recorded
// with the action in the ledger.

const osUser = (): string => {
  try {
    return userInfo().username;
  } catch {
    // No passwd entry (some containers): the environment may still say.
    return process.env.USER ?? 'unknown';
  }
};

export interface ByFlag {
  readonly by: string;
}

export const withBy = (command: Command): Command => command.option('--by <who>', 'who is doing this, recorded in the ledger (the OS user when not given)', osUser());

/** Recorded as each event's metadata: where the action came from. */
export const CLI_METADATA = { via: 'cli' } as const;
