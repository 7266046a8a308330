import cliProgress from 'cli-progress';

export interface Progress {
  /** `done` of the total so far; `total` when it changed. */
  update(done: number, total?: number): void;
  /** Removes the bar (a terminal), or prints the last line (no terminal, when `plain` lines are asked for). */
  stop(): void;
}

export interface ProgressOptions {
  readonly label: string;
  /** What is counted, plural: "events", "jobs". */
  readonly unit: string;
  readonly total: number;
  /** Without a terminal, a line every `plainEveryMs` goes here; omitted: nothing (the command prints a summary). */
  readonly plain?: (line: string) => void;
  readonly plainEveryMs?: number;
}

/**
 * A progress bar on stderr with the rate and the ETA when stderr is a terminal (cli-progress).
 * Otherwise no escape codes: optional plain lines, so logs and pipes stay readable.
 */
export const progress = ({ label, unit, total, plain, plainEveryMs = 2_000 }: ProgressOptions): Progress => {
  const started = Date.now();
  const rate = (done: number) => Math.round(done / Math.max((Date.now() - started) / 1000, 0.001));
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: `${label} [{bar}] {percentage}% | {value}/{total} ${unit} | {rate} ${unit}/s | ETA {eta_formatted}`,
        stream: process.stderr,
        hideCursor: true,
        clearOnComplete: true,
        etaBuffer: 20,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0, { rate: 0 });
    return {
      update: (done, newTotal) => {
        if (newTotal !== undefined) bar.setTotal(newTotal);
        bar.update(done, { rate: rate(done) });
      },
      stop: () => bar.stop(),
    };
  }
  let last = { done: 0, total, at: started };
  let printed = '';
  const line = () => {
    printed = `${label}: ${last.done}/${last.total} ${unit}`;
    return `${printed} (${rate(last.done)} ${unit}/s)`;
  };
  return {
    update: (done, newTotal) => {
      const at = Date.now();
      const due = at - last.at >= plainEveryMs;
      last = { done, total: newTotal ?? last.total, at: due ? at : last.at };
      if (due) plain?.(line());
    },
    stop: () => {
      if (printed !== `${label}: ${last.done}/${last.total} ${unit}`) plain?.(line());
    },
  };
};
