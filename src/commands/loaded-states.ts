import type { KeyState } from '../domain/key-state.js';
import type { StreamRevision } from '../domain/ports/event-store.js';
import type { Loaded } from './key-command.js';

// The states the key writer's `load` gave its readers (explain, state, retry --key, the operator
// actions' checks), kept to be brought up to date by the events after them instead of read again
// from the newest snapshot. A capped queue's stream holds every job of its queue: its snapshot of
// 20,000 jobs took ~200 ms to read and decode for each explanation of one of them (bench:reads);
// brought up from a kept state it takes the events since. The states are shared by every reader
// (Loaded is readonly: a reader that changed one would change the others'), never touched by a
// flush (whose states are the writer's own, ./key-states.ts), and bounded by the jobs they hold.

interface Kept extends Loaded {
  readonly revision: StreamRevision;
  readonly jobs: number;
}

export class LoadedStates {
  private readonly kept = new Map<string, Kept>();
  private jobs = 0;

  /** At most `maxJobs` jobs in the states kept (a state of more is not kept). */
  constructor(private readonly maxJobs: number) {}

  get(stream: string): Kept | undefined {
    const kept = this.kept.get(stream);
    if (kept === undefined) return undefined;
    // The most recently read go last.
    this.kept.delete(stream);
    this.kept.set(stream, kept);
    return kept;
  }

  set(stream: string, state: KeyState, revision: StreamRevision): void {
    this.drop(stream);
    let jobs = 0;
    for (const _ in state.jobs) jobs++;
    if (jobs > this.maxJobs) return;
    this.kept.set(stream, { state, revision, jobs });
    this.jobs += jobs;
    for (const oldest of this.kept.keys()) {
      if (this.jobs <= this.maxJobs) break;
      this.drop(oldest);
    }
  }

  drop(stream: string): void {
    const kept = this.kept.get(stream);
    if (kept === undefined) return;
    this.kept.delete(stream);
    this.jobs -= kept.jobs;
  }
}
