/**
 * A poll loop's sleep that a notification cuts short. A wake-up that arrives while the loop is
 * busy (reading, handling) is remembered, so the next sleep returns at once: a notification is
 * never lost between "read found nothing" and "start sleeping".
 */
export class Wakeup {
  private woken = false;
  private waiter: (() => void) | undefined;

  wake(): void {
    this.woken = true;
    this.waiter?.();
  }

  /** Call before reading: wake-ups before this point are covered by the read. */
  reset(): void {
    this.woken = false;
  }

  async sleep(ms: number): Promise<void> {
    if (this.woken) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiter = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.waiter = undefined;
  }
}
