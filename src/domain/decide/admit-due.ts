import { byPromotionOrder, jobsIn } from '../key-state.js';
import { accept, type Decision, type Outcome } from './decision.js';

/** Scheduled jobs and retries whose time has come: each takes a free slot or parks, in promotion order. */
export const admitDue = (d: Decision): Outcome => {
  const due = jobsIn(d.state, 'scheduled')
    .filter((j) => j.runAt !== null && j.runAt <= d.now)
    .sort(byPromotionOrder);
  for (const job of due) d.admit(job.jobId);
  return accept(d);
};
