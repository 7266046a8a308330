import { epochMs, toMs } from './sql.js';

/** Who paused a key, why and when (jl_keys.paused_*): while paused nothing new is admitted on it. */
export interface KeyPause {
  readonly by: string;
  readonly reason: string | null;
  readonly at: number;
}

/** The pause of the row `k` (jl_keys or jl_key_stats, which carry its columns) as JSON, or NULL while the key runs. */
export const pauseJson = (k: string): string =>
  `CASE WHEN ${k}.paused_at IS NULL THEN NULL ELSE json_build_object('by', ${k}.paused_by, 'reason', ${k}.paused_reason, 'at', ${epochMs(`${k}.paused_at`)}) END`;

export const toPause = (row: KeyPause | null): KeyPause | null => (row === null ? null : { ...row, at: toMs(row.at) });
