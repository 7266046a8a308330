import type { CommandOf } from '../commands.js';
import { accept, type Decision, type Outcome } from './decision.js';

/**
 * The key's free slots go to its line from `after` on: the follow-up of a decision that freed a
 * slot here but did not have the streams of the jobs under further limits waiting in the line.
 */
export const fillSlots = (c: CommandOf<'FillSlots'>, d: Decision): Outcome => {
  d.fillSlots(c.after);
  return accept(d);
};
