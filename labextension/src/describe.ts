/**
 * What the UI says about a status: pure functions from the server's JSON to words and numbers.
 *
 * - `describeStatus` -> the status bar item (label, tooltip, progress bar, tone).
 * - `pauseSummary`   -> the message shown once a pause has finished.
 * - `resumeOffer`    -> the resume dialog's content (when, size, estimate, verdict, choices).
 */

import { formatBytes, formatDuration, formatRate, plural } from './format';
import {
  ICheckpointResult,
  IOperation,
  IPausedRecord,
  IResumeResult,
  IKernelStatus,
  IProgress,
  ISnapshotRow,
  IStatus,
  IVerdict,
  LEVELS,
  Level,
  State
} from './types';

export const STATE_LABELS: Record<State, string> = {
  running: 'Running',
  pausing: 'Pausing',
  releasing: 'Releasing the GPU',
  paused: 'Paused',
  waiting_for_resources: 'Waiting for resources',
  restoring: 'Restoring',
  ready: 'Ready',
  failed: 'Failed'
};

/** States in which an operation is in flight (jupyter_gkeresume/states.py ACTIVE). */
export const ACTIVE_STATES: ReadonlySet<State> = new Set<State>([
  'pausing',
  'releasing',
  'waiting_for_resources',
  'restoring'
]);

export type Tone = 'idle' | 'busy' | 'good' | 'bad';

export interface IProgressView {
  /** 0..1, or null when the total is not known yet (an indeterminate bar). */
  fraction: number | null;
  /** "writing 512 MiB / 2.0 GiB · 100 MiB/s" */
  text: string;
}

export interface IStatusView {
  state: State;
  /** Short text for the status bar: "Pausing: writing 25%". */
  label: string;
  /** The whole truth, for the tooltip and screen readers. */
  title: string;
  progress: IProgressView | null;
  tone: Tone;
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

export function progressView(progress: IProgress): IProgressView {
  const known = progress.total_bytes > 0;
  const fraction = known ? Math.min(1, progress.done_bytes / progress.total_bytes) : null;
  const amount = known
    ? `${formatBytes(progress.done_bytes)} / ${formatBytes(progress.total_bytes)}`
    : formatBytes(progress.done_bytes);
  const rate = progress.rate > 0 ? ` · ${formatRate(progress.rate)}` : '';
  return { fraction, text: `${progress.phase} ${amount}${rate}` };
}

function toneOf(status: IStatus): Tone {
  if (status.state === 'failed') {
    return 'bad';
  }
  if (ACTIVE_STATES.has(status.state)) {
    return 'busy';
  }
  if (status.state === 'paused' || status.state === 'ready') {
    return 'good';
  }
  return status.last_error ? 'bad' : 'idle';
}

/** The status bar's view of a status. */
export function describeStatus(status: IStatus): IStatusView {
  const state = status.state;
  const progress = combinedProgress(status.kernels);
  const view = progress ? progressView(progress) : null;
  let label = STATE_LABELS[state];
  if (view && (state === 'pausing' || state === 'restoring')) {
    label += `: ${progress!.phase}`;
    if (view.fraction !== null) {
      label += ` ${Math.floor(view.fraction * 100)}%`;
    }
  } else if (state === 'failed' && status.reason) {
    label += `: ${status.reason}`;
  } else if (state === 'running' && status.last_error) {
    label += ` (last ${status.last_error.operation} failed)`;
  }
  const lines = [`Workspace ${status.workspace}: ${STATE_LABELS[state].toLowerCase()}`];
  if (status.reason) {
    lines.push(status.reason);
  }
  if (view) {
    lines.push(view.text);
  }
  if (state === 'paused' && status.paused) {
    lines.push(`Paused at ${status.paused.paused_at}; GPU released`);
  }
  if (status.last_error && state !== 'failed') {
    lines.push(`Last error (${status.last_error.operation}): ${status.last_error.message}`);
  }
  lines.push(`Store: ${status.store} · release: ${status.release_backend}`);
  return { state, label, title: lines.join('\n'), progress: view, tone: toneOf(status) };
}

/** The checkpoint results among `kernels`, by kernel id. */
export function checkpointResults(kernels: IKernelStatus[]): Map<string, ICheckpointResult> {
  const found = new Map<string, ICheckpointResult>();
  for (const kernel of kernels) {
    const result = kernel.result;
    if (result && 'saved' in result) {
      found.set(kernel.kernel_id, result);
    }
  }
  return found;
}

export interface IMessage {
  title: string;
  lines: string[];
}

/** What a pause saved in one kernel: a checkpoint result or a paused record's kernel entry. */
export type SavedSummary = Pick<
  ICheckpointResult,
  'bytes_total' | 'bytes_new' | 'saved' | 'skipped'
> &
  Partial<Pick<ICheckpointResult, 'warnings'>>;

/** The paused record's per-kernel results; empty when a kernel's entry lacks them. */
export function recordedResults(record: IPausedRecord): SavedSummary[] {
  if (!record.kernels.every(k => Array.isArray(k.saved))) {
    return [];
  }
  return record.kernels.map(k => ({
    bytes_total: k.bytes_total,
    bytes_new: k.bytes_new ?? 0,
    saved: k.saved!,
    skipped: k.skipped ?? []
  }));
}

/**
 * What a finished pause saved. A released pause's record names every kernel's saved and
 * skipped objects; otherwise `results` are the checkpoint results seen while it ran; without
 * either the paused record and the last snapshot row still give sizes and counts.
 */
export function pauseSummary(status: IStatus, polled: ICheckpointResult[]): IMessage {
  const released = status.state === 'paused' && status.paused !== null;
  const title = released ? 'Workspace paused' : 'Checkpoint saved';
  const lines: string[] = [];
  const recorded = released ? recordedResults(status.paused!) : [];
  const results: SavedSummary[] = recorded.length ? recorded : polled;
  if (results.length) {
    const bytes = results.reduce((n, r) => n + r.bytes_total, 0);
    const fresh = results.reduce((n, r) => n + r.bytes_new, 0);
    const saved = results.flatMap(r => r.saved);
    lines.push(
      `Saved ${plural(saved.length, 'object')} (${formatBytes(bytes)}, ` +
        `${formatBytes(fresh)} new) from ${plural(results.length, 'kernel')}` +
        (saved.length ? `: ${saved.slice(0, 12).join(', ')}${saved.length > 12 ? ', …' : ''}` : '.')
    );
    const skipped = results.flatMap(r => r.skipped);
    for (const s of skipped) {
      lines.push(`Not saved: ${s.name} (${s.type}): ${s.reason}`);
    }
    for (const warning of results.flatMap(r => r.warnings ?? [])) {
      lines.push(`Warning: ${warning}`);
    }
  } else {
    const bytes = status.paused
      ? status.paused.kernels.reduce((n, k) => n + k.bytes_total, 0)
      : (status.last_snapshot?.bytes ?? 0);
    const objects = status.last_snapshot?.objects ?? 0;
    lines.push(`Saved ${plural(objects, 'object')} (${formatBytes(bytes)}).`);
    const skipped = status.last_snapshot?.skipped ?? 0;
    if (skipped) {
      lines.push(`${plural(skipped, 'object')} could not be saved.`);
    }
  }
  if (released) {
    const notebooks = status.paused!.kernels.map(k => k.notebook ?? k.kernel_id);
    lines.push(`Notebooks: ${notebooks.join(', ')}.`);
    lines.push(
      `The kernels were stopped and the GPU was released (release backend: ` +
        `${status.paused!.release_backend}). Open this workspace again to resume.`
    );
  } else {
    lines.push('The kernels keep running.');
  }
  return { title, lines };
}

/** A nominal restore rate for the estimate (GCS read into host and device memory). */
export const NOMINAL_RESTORE_RATE = 200 * 1024 * 1024;
/** Seconds to start a kernel and import the restore code, added once per notebook. */
export const KERNEL_START_SECONDS = 5;

export interface IResumeOffer {
  pausedAt: string;
  reason: string | null;
  notebooks: string[];
  bytes: number;
  estimateSeconds: number;
  /** The worst verdict over the paused snapshots; null when none could be read. */
  level: Level | null;
  reasons: string[];
  objectsAtRisk: Record<string, string>;
  /** Snapshots of the record that could not be read (signature, missing), with the error. */
  problems: string[];
  /** Saved objects that load here (saved minus at risk), when the server lists saved names. */
  compatibleObjects: string[] | null;
  canResume: boolean;
  canResumeCompatible: boolean;
}

export function worstVerdict(verdicts: IVerdict[]): IVerdict | null {
  if (!verdicts.length) {
    return null;
  }
  const level = verdicts
    .map(v => v.level)
    .reduce((a, b) => (LEVELS.indexOf(b) > LEVELS.indexOf(a) ? b : a));
  return {
    level,
    reasons: [...new Set(verdicts.flatMap(v => v.reasons))],
    objects_at_risk: Object.assign({}, ...verdicts.map(v => v.objects_at_risk))
  };
}

/** The resume dialog's content for a paused workspace, or null when nothing is paused. */
export function resumeOffer(status: IStatus, rows: ISnapshotRow[]): IResumeOffer | null {
  const record = status.paused;
  if (!record) {
    return null;
  }
  const byId = new Map(rows.map(r => [r.id, r]));
  const verdicts: IVerdict[] = [];
  const problems: string[] = [];
  const saved: string[] = [];
  let namesKnown = true;
  for (const kernel of record.kernels) {
    const row = byId.get(kernel.snapshot_id);
    if (!row) {
      problems.push(`${kernel.snapshot_id}: not found in the store`);
    } else if (row.error || !row.verdict) {
      problems.push(`${kernel.snapshot_id}: ${row.error ?? 'no compatibility verdict'}`);
    } else {
      verdicts.push(row.verdict);
      namesKnown = namesKnown && Array.isArray(row.saved);
      saved.push(...(row.saved ?? []));
    }
  }
  const verdict = worstVerdict(verdicts);
  const bytes = record.kernels.reduce((n, k) => n + k.bytes_total, 0);
  const level = verdict?.level ?? null;
  const usable = problems.length === 0 && level !== null && level !== 'incompatible';
  const atRisk = verdict?.objects_at_risk ?? {};
  const compatible = namesKnown ? [...new Set(saved)].filter(n => !(n in atRisk)) : null;
  return {
    pausedAt: record.paused_at,
    reason: record.reason,
    notebooks: record.kernels.map(k => k.notebook ?? `(kernel ${k.kernel_name ?? '?'})`),
    bytes,
    estimateSeconds: bytes / NOMINAL_RESTORE_RATE + KERNEL_START_SECONDS * record.kernels.length,
    level,
    reasons: verdict?.reasons ?? [],
    objectsAtRisk: atRisk,
    problems,
    compatibleObjects: compatible,
    canResume: usable,
    // One `only` list serves every kernel: the server gives each kernel the names its
    // snapshot holds when the record lists them (`saved`); an older record names none, and a
    // kernel refuses names its snapshot lacks, so then only a one-notebook pause qualifies.
    canResumeCompatible:
      usable &&
      level === 'partial' &&
      !!compatible?.length &&
      (record.kernels.length === 1 || recordedResults(record).length > 0)
  };
}

/** One line for the resume dialog: "about 12 s (2.0 GiB)". */
export function estimateText(offer: IResumeOffer): string {
  return `about ${formatDuration(offer.estimateSeconds)} (${formatBytes(offer.bytes)})`;
}

/** What a finished resume brought back (or why it failed), from the kernels' resume results. */
export function resumeSummary(status: IStatus, operation: IOperation): IMessage {
  if (status.state === 'failed' || (status.last_error && status.last_error.operation === 'resume')) {
    const why = status.reason ?? status.last_error?.message ?? 'unknown reason';
    return {
      title: 'Resume failed',
      lines: [why, 'Nothing was lost: the snapshots and the paused record are kept, so you can retry.']
    };
  }
  if (operation.mode === 'files-only') {
    return {
      title: 'Started fresh',
      lines: [
        'Fresh kernels were started for the notebooks and the paused record was cleared.',
        'Your notebooks and files are as they were; the snapshots are still listed under Snapshots.'
      ]
    };
  }
  // A resume from the paused record starts its kernels as it goes: the ones it brought back
  // are those it names, and those now `ready` (the state only a finished restore leaves).
  const results = status.kernels
    .filter(k => operation.kernels.includes(k.kernel_id) || k.state === 'ready')
    .map(k => k.result)
    .filter((r): r is IResumeResult => !!r && 'restored' in r);
  const restored = results.flatMap(r => r.restored);
  const lines = [
    `Restored ${plural(restored.length, 'object')} into ${plural(results.length, 'kernel')}` +
      (restored.length ? `: ${restored.slice(0, 12).join(', ')}${restored.length > 12 ? ', …' : ''}` : '.')
  ];
  for (const s of results.flatMap(r => r.not_restored)) {
    lines.push(`Not restored: ${s.name} (${s.type}): ${s.reason}`);
  }
  lines.push(...results.flatMap(r => r.warnings).map(w => `Warning: ${w}`));
  return { title: 'Workspace resumed', lines };
}
