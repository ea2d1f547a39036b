/**
 * Progress as people read it: pure functions from the kernels' progress reports (and the
 * operation's learned estimate) to one fraction for the bar, one sentence and the time left.
 *
 * - `combinedProgress` sums the reports of the kernels in flight.
 * - `overallFraction` places a phase inside the whole operation (writing, then verifying, then
 *   releasing; starting, then reading, then unpickling), so the bar moves through every phase
 *   instead of refilling per phase.
 * - `rateKnown`: a phase's rate means something only once it ran `RATE_MIN_SECONDS` over
 *   `RATE_MIN_FRACTION` of its bytes (jupyter_gkeresume/rates.py, same constants); before, the
 *   first chunk's timing would promise hours or minutes that never come, so neither the rate
 *   nor a time left by it is said.
 * - `secondsLeft` is the larger of what the current phase still needs at its known rate and
 *   what the workspace's recorded operations say is left (`operation.estimate_seconds`, the
 *   server's `rates.expected_seconds`); until the rate is known, the latter alone, or none.
 * - `progressSentence` -> "writing 412 MiB of 764 MiB at 95 MiB/s, about 4 s left".
 */

import { aboutDuration, formatBytes, formatRate } from './format';
import { IKernelStatus, IOperation, IProgress, Phase, State } from './types';

/** States in which an operation is in flight (jupyter_gkeresume/states.py ACTIVE). */
export const ACTIVE_STATES: ReadonlySet<State> = new Set<State>([
  'pausing',
  'releasing',
  'waiting_for_resources',
  'restoring'
]);

/** What each phase is doing, as the verb of a sentence. */
export const PHASE_WORDS: Record<Phase, string> = {
  hashing: 'hashing',
  writing: 'writing',
  committing: 'committing the snapshot',
  verifying: 'verifying',
  releasing: 'releasing',
  starting: 'starting the kernels',
  installing: 'installing packages',
  reading: 'reading',
  restoring: 'restoring',
  unpickling: 'unpickling',
  done: 'finishing'
};

/** Where each phase sits in its operation, as [start, end] of the whole bar. */
const PAUSE_BANDS: Partial<Record<Phase, [number, number]>> = {
  hashing: [0, 0.1],
  writing: [0, 0.75],
  committing: [0.75, 0.75],
  verifying: [0.75, 0.95],
  releasing: [0.95, 1],
  done: [1, 1]
};
const CHECKPOINT_BANDS: Partial<Record<Phase, [number, number]>> = {
  hashing: [0, 0.1],
  writing: [0, 0.8],
  committing: [0.8, 0.8],
  verifying: [0.8, 1],
  done: [1, 1]
};
const RESUME_BANDS: Partial<Record<Phase, [number, number]>> = {
  starting: [0, 0.05],
  installing: [0.05, 0.05],
  reading: [0.05, 0.9],
  restoring: [0.9, 1],
  unpickling: [0.9, 1],
  done: [1, 1]
};

/** A phase's rate is trusted after it ran this long (seconds) ... (rates.py RATE_MIN_SECONDS) */
export const RATE_MIN_SECONDS = 1;
/** ... and moved this share of its bytes (rates.py RATE_MIN_FRACTION). */
export const RATE_MIN_FRACTION = 0.05;

/** The phase ran long enough, over enough of its bytes (a total of 0: not known), for its rate
 * to mean something (rates.py `rate_known`). */
export function rateKnown(progress: IProgress): boolean {
  const { done_bytes: done, total_bytes: total, seconds } = progress;
  return (
    progress.rate > 0 && done > 0 && seconds >= RATE_MIN_SECONDS && done >= RATE_MIN_FRACTION * total
  );
}

/** The combined progress of the kernels in flight (sums their bytes and rates). */
export function combinedProgress(kernels: IKernelStatus[]): IProgress | null {
  const reports = kernels
    .filter(k => ACTIVE_STATES.has(k.state) && k.progress)
    .map(k => k.progress as IProgress);
  if (!reports.length) {
    return null;
  }
  return reports.reduce((sum, p) => ({
    phase: sum.phase,
    done_bytes: sum.done_bytes + p.done_bytes,
    total_bytes: sum.total_bytes + p.total_bytes,
    rate: sum.rate + p.rate,
    seconds: Math.max(sum.seconds, p.seconds)
  }));
}

/** 0..1 within its own phase, or null when the phase has no byte total. */
export function phaseFraction(progress: IProgress): number | null {
  if (progress.total_bytes <= 0) {
    return progress.phase === 'done' ? 1 : null;
  }
  return Math.max(0, Math.min(1, progress.done_bytes / progress.total_bytes));
}

function bandsOf(operation: IOperation | null): Partial<Record<Phase, [number, number]>> {
  if (operation?.kind === 'resume') {
    return RESUME_BANDS;
  }
  return operation?.release === false ? CHECKPOINT_BANDS : PAUSE_BANDS;
}

/**
 * How far the whole operation is, 0..1: the phase's band, filled by its bytes; a phase without
 * bytes is placed by the learned estimate (elapsed / estimate, kept inside the band), else at
 * its band's start. Null when nothing says how far it is (an indeterminate bar).
 */
export function overallFraction(
  operation: IOperation | null,
  progress: IProgress | null,
  nowSeconds: number
): number | null {
  const byTime = timeFraction(operation, nowSeconds);
  if (!progress) {
    return byTime;
  }
  const band = bandsOf(operation)[progress.phase];
  const within = phaseFraction(progress);
  if (!band) {
    return within ?? byTime;
  }
  const [start, end] = band;
  if (within !== null) {
    return start + (end - start) * within;
  }
  return byTime === null ? start : Math.max(start, Math.min(end, byTime));
}

function timeFraction(operation: IOperation | null, nowSeconds: number): number | null {
  const estimate = operation?.estimate_seconds;
  if (!operation || !estimate || estimate <= 0) {
    return null;
  }
  return Math.max(0, Math.min(0.99, (nowSeconds - operation.started) / estimate));
}

/** Seconds the operation still needs, or null when neither its rate nor an estimate tells. */
export function secondsLeft(
  operation: IOperation | null,
  progress: IProgress | null,
  nowSeconds: number
): number | null {
  let byRate: number | null = null;
  if (progress && progress.total_bytes > 0 && rateKnown(progress)) {
    byRate = Math.max(0, progress.total_bytes - progress.done_bytes) / progress.rate;
  }
  const estimate = operation?.estimate_seconds;
  const byEstimate =
    operation && estimate && estimate > 0
      ? Math.max(0, estimate - (nowSeconds - operation.started))
      : null;
  if (byRate === null) {
    return byEstimate;
  }
  return byEstimate === null ? byRate : Math.max(byRate, byEstimate);
}

/** "about 4 s left", "under a second left". */
export function leftText(seconds: number): string {
  return `${aboutDuration(seconds)} left`;
}

/**
 * One clause for a progress report: "writing 412 MiB of 764 MiB at 95 MiB/s" (the rate once
 * known), with the time left appended when known. A phase without bytes is just its verb.
 */
export function progressSentence(progress: IProgress, left: number | null): string {
  let text = PHASE_WORDS[progress.phase] ?? String(progress.phase);
  if (progress.total_bytes > 0) {
    text += ` ${formatBytes(progress.done_bytes)} of ${formatBytes(progress.total_bytes)}`;
  } else if (progress.done_bytes > 0) {
    text += ` ${formatBytes(progress.done_bytes)}`;
  }
  if (rateKnown(progress) && progress.phase !== 'done') {
    text += ` at ${formatRate(progress.rate)}`;
  }
  return left === null ? text : `${text}, ${leftText(left)}`;
}
