/**
 * What the UI says about a status: pure functions from the server's JSON to words and numbers.
 * Every line is one sentence that says what happened on this deployment.
 *
 * - `describeStatus`  -> the status bar item (one-sentence label, tooltip, bar, tone).
 * - `releaseDone`     -> what a release did here (kernels / server / pod; GPUs only when there were).
 * - `pauseSummary`, `resumeSummary` -> the message shown once an operation has finished.
 * - `notebookBadge`   -> the "Paused" item in a notebook's toolbar.
 * - `snapshotLabel`   -> a readable name for an unnamed snapshot.
 */

import { formatAge, formatBytes, formatDuration, formatUTC, plural } from './format';
import {
  ACTIVE_STATES,
  combinedProgress,
  leftText,
  overallFraction,
  progressSentence,
  secondsLeft
} from './progress';
import {
  ICheckpointResult,
  IOperation,
  ISkipped,
  IPausedRecord,
  IResumeResult,
  IKernelStatus,
  IProgress,
  ISnapshotRow,
  IStatus,
  IWaitingFor,
  State
} from './types';
import { documentLines } from './labsaves';

export { ACTIVE_STATES } from './progress';

export const STATE_LABELS: Record<State, string> = {
  running: 'Running',
  pausing: 'Pausing',
  releasing: 'Releasing',
  paused: 'Paused',
  waiting_for_resources: 'Resuming',
  restoring: 'Resuming',
  ready: 'Running',
  failed: 'Failed'
};

/** How long after a resume the status bar says "resumed" before it reads plain "Running". */
export const RESUMED_SHOWN_SECONDS = 20;

export type Tone = 'idle' | 'busy' | 'good' | 'bad';

export interface IProgressView {
  /** 0..1 of the whole operation, or null when nothing says how far (an indeterminate bar). */
  fraction: number | null;
  /** The progress clause: "writing 512 MiB of 2.0 GiB at 100 MiB/s, about 15 s left". */
  text: string;
}

export interface IStatusView {
  /** The state shown: `ready` reads as `running` once the resume is a while ago. */
  state: State;
  /** One sentence for the status bar: "Pausing: writing 25 MiB of 1.0 GiB at 90 MiB/s". */
  label: string;
  /** The whole truth, for the tooltip and screen readers: one sentence a line. */
  title: string;
  /** Shown for every operation in flight (an indeterminate bar when nothing says how far). */
  progress: IProgressView | null;
  tone: Tone;
  /** The in-flight pause can still be cancelled (`POST cancel`). */
  cancellable: boolean;
}

/** What a release does on this deployment, as the rest of "Releasing: ...". */
export function releaseAction(backend: string, gpus: number | null): string {
  const freeing = gpus ? `, freeing ${plural(gpus, 'GPU')}` : '';
  if (backend === 'jupyterhub') {
    return `stopping this server through JupyterHub${freeing}`;
  }
  if (backend.startsWith('kubeflow')) {
    return `releasing the pod through Kubeflow${freeing}`;
  }
  if (backend === 'none') {
    return `stopping the kernels${freeing}`;
  }
  return `releasing the workspace (${backend})${freeing}`;
}

/** What a finished release did here, one sentence ("The kernels were stopped; ..."). */
export function releaseDone(backend: string, gpus: number): string {
  const freed = gpus ? `, giving back ${plural(gpus, 'GPU')}` : '';
  if (backend === 'jupyterhub') {
    return `The kernels were stopped and this server was stopped through JupyterHub${freed}.`;
  }
  if (backend.startsWith('kubeflow')) {
    return `The kernels were stopped and the pod was released through Kubeflow${freed}.`;
  }
  if (backend === 'none') {
    const freeing = gpus ? `, freeing ${plural(gpus, 'GPU')}` : '';
    return `The kernels were stopped${freeing}; this server keeps running.`;
  }
  return `The kernels were stopped and the ${backend} backend released the workspace${freed}.`;
}

/** "waiting for cell 12 of train.ipynb (running for 2 min)". */
export function waitingText(waiting: IWaitingFor): string {
  const cell = waiting.execution_count !== null ? `cell ${waiting.execution_count}` : 'the running cell';
  const where = waiting.notebook ? ` of ${waiting.notebook}` : '';
  const running =
    waiting.running_seconds !== null ? ` (running for ${formatDuration(waiting.running_seconds)})` : '';
  return `waiting for ${cell}${where}${running}`;
}

function toneOf(status: IStatus, state: State): Tone {
  if (state === 'failed') {
    return 'bad';
  }
  if (ACTIVE_STATES.has(state) || status.operation) {
    return 'busy';
  }
  if (state === 'paused' || state === 'ready') {
    return 'good';
  }
  return status.last_error ? 'bad' : 'idle';
}

/** Where a state without a progress report stands: releasing and starting have no bytes. */
function stateProgress(state: State): IProgress | null {
  const phase = state === 'releasing' ? 'releasing' : state === 'waiting_for_resources' ? 'starting' : null;
  return phase ? { phase, done_bytes: 0, total_bytes: 0, rate: 0, seconds: 0 } : null;
}

/** The sentence for an operation in flight: "Pausing: writing 25 MiB of 1.0 GiB ...". */
function inFlightLabel(status: IStatus, operation: IOperation | null, nowSeconds: number): string {
  const progress = combinedProgress(status.kernels);
  const left = secondsLeft(operation, progress, nowSeconds);
  const withLeft = (text: string): string => (left === null ? text : `${text}, ${leftText(left)}`);
  const kind = operation?.kind ?? (['pausing', 'releasing'].includes(status.state) ? 'pause' : 'resume');
  const doing = kind === 'pause' ? 'Pausing' : 'Resuming';
  if (operation?.waiting_for) {
    return `Pause queued: ${waitingText(operation.waiting_for)}`;
  }
  if (progress && progress.phase !== 'releasing' && progress.phase !== 'done') {
    return `${doing}: ${progressSentence(progress, left)}`;
  }
  if (status.state === 'releasing') {
    const gpus = status.paused?.gpus ?? null;
    return `Releasing: ${withLeft(releaseAction(status.release_backend, gpus))}`;
  }
  if (kind === 'resume') {
    return `Resuming: ${withLeft(status.state === 'restoring' ? 'restoring' : 'starting the kernels')}`;
  }
  return `Pausing: ${withLeft('saving the kernels’ state')}`;
}

/** The status bar's view of a status, at `now` (ms since the epoch). */
export function describeStatus(status: IStatus, now = Date.now()): IStatusView {
  const nowSeconds = now / 1000;
  const operation = status.operation;
  let state = status.state;
  const resumedLately = state === 'ready' && nowSeconds - status.since < RESUMED_SHOWN_SECONDS;
  if (state === 'ready' && !resumedLately) {
    state = 'running';
  }
  let label = STATE_LABELS[state];
  let progress: IProgressView | null = null;
  if (operation !== null || ACTIVE_STATES.has(state)) {
    label = inFlightLabel(status, operation, nowSeconds);
    const reported = combinedProgress(status.kernels) ?? stateProgress(state);
    const fraction = overallFraction(operation, reported, nowSeconds);
    progress = { fraction, text: label.slice(label.indexOf(': ') + 2) };
  } else if (resumedLately) {
    label = 'Running (resumed)';
  } else if (state === 'failed' && status.reason) {
    label = `Failed: ${status.reason}`;
  } else if (state === 'running' && status.last_error) {
    label = `Running (the last ${status.last_error.operation} failed)`;
  }
  const lines = [`Workspace ${status.workspace}: ${label}.`];
  if (status.reason && state !== 'failed') {
    lines.push(`Reason: ${status.reason}.`);
  }
  if (state === 'paused' && status.paused) {
    lines.push(`Paused at ${status.paused.paused_at}.`);
    lines.push(releaseDone(status.paused.release_backend, status.paused.gpus));
  }
  if (status.last_error && state !== 'failed') {
    lines.push(`The last ${status.last_error.operation} failed: ${status.last_error.message}`);
  }
  lines.push(`Store: ${status.store}; release backend: ${status.release_backend}.`);
  return {
    state,
    label,
    title: lines.join('\n'),
    progress,
    tone: toneOf(status, state),
    cancellable: !!operation?.cancellable
  };
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
  Partial<Pick<ICheckpointResult, 'warnings' | 'modules'>>;

/** How many names a message lists before "and N more". */
const LISTED = 12;

function listed(names: string[]): string {
  const more = names.length - LISTED;
  return more > 0 ? `${names.slice(0, LISTED).join(', ')} and ${more} more` : names.join(', ');
}

/**
 * What the user reads about what could not be saved, each thing once: "Not saved: gen
 * (generator): why" for a name left out, and for a saved object with parts that come back as
 * placeholders one line under its name: "proc comes back without its thread (why) and its
 * child process (why)."
 */
export function skippedLines(skipped: ISkipped[]): string[] {
  const lines: string[] = [];
  const parts = new Map<string, ISkipped[]>();
  for (const s of skipped) {
    if (s.inside) {
      parts.set(s.name, [...(parts.get(s.name) ?? []), s]);
    } else {
      lines.push(`Not saved: ${s.name} (${s.type}): ${s.reason}`);
    }
  }
  for (const [name, inside] of parts) {
    const what = inside.map(s => `its ${s.type} (${s.reason})`);
    const joined = what.length > 1 ? `${what.slice(0, -1).join(', ')} and ${what[what.length - 1]}` : what[0];
    lines.push(`${name} comes back without ${joined}.`);
  }
  return lines;
}

/** `names` as the user's data (no modules, no IPython `_` names; each once) and the modules. */
function usersNames(names: string[], modules: string[]): { data: string[]; modules: string[] } {
  const apart = [...new Set(modules)];
  const data = [...new Set(names)].filter(n => !apart.includes(n) && !n.startsWith('_'));
  return { data, modules: apart };
}

/**
 * The saved objects as the user reads them: "Saved 12 objects (677 MiB, 10 MiB new) from 1
 * kernel: opt, df, ..." names the user's data, those saved whole first, then those saved
 * without some parts (`skippedLines` says which); modules are listed apart ("Modules, imported
 * again on resume: torch, np.") and IPython's `_` names not at all (they are saved all the
 * same). One size: the kernels' `bytes_total`, what the status bar and the resume dialog say.
 */
export function savedLines(results: SavedSummary[]): string[] {
  const bytes = results.reduce((n, r) => n + r.bytes_total, 0);
  const fresh = results.reduce((n, r) => n + r.bytes_new, 0);
  const partly = new Set(results.flatMap(r => r.skipped.filter(s => s.inside).map(s => s.name)));
  const { data, modules } = usersNames(results.flatMap(r => r.saved), results.flatMap(r => r.modules ?? []));
  const names = [...data.filter(n => !partly.has(n)), ...data.filter(n => partly.has(n))];
  const lines = [
    `Saved ${plural(names.length, 'object')} (${formatBytes(bytes)}, ` +
      `${formatBytes(fresh)} new) from ${plural(results.length, 'kernel')}` +
      (names.length ? `: ${listed(names)}` : '.')
  ];
  if (modules.length) {
    lines.push(`Modules, imported again on resume: ${listed(modules)}.`);
  }
  return lines;
}

/** The paused record's per-kernel results; empty when a kernel's entry lacks them. */
export function recordedResults(record: IPausedRecord): SavedSummary[] {
  if (!record.kernels.every(k => Array.isArray(k.saved))) {
    return [];
  }
  return record.kernels.map(k => ({
    bytes_total: k.bytes_total,
    bytes_new: k.bytes_new ?? 0,
    saved: k.saved!,
    skipped: k.skipped ?? [],
    modules: k.modules ?? []
  }));
}

/** Why an idle pause happened, one sentence: "Paused at 2026-11-30 10:15 UTC because nobody
 * was active since 2026-11-30 10:14 UTC (1 min 1 s; the idle pause comes after 1 min)."; null
 * for any other pause. */
export function idleLine(record: IPausedRecord): string | null {
  const idle = record.reason === 'idle' ? record.idle : null;
  if (!idle) {
    return record.reason === 'idle'
      ? `Paused at ${formatUTC(record.paused_at)} because nobody was active.`
      : null;
  }
  return (
    `Paused at ${formatUTC(record.paused_at)} because nobody was active since ` +
    `${formatUTC(idle.since)} (${formatDuration(idle.seconds)}; the idle pause comes after ` +
    `${formatDuration(idle.timeout)}).`
  );
}

/**
 * What a finished pause saved. A released pause's record names every kernel's saved and
 * skipped objects; otherwise `results` are the checkpoint results seen while it ran; without
 * either the paused record and the last snapshot row still give sizes and counts.
 */
export function pauseSummary(status: IStatus, polled: ICheckpointResult[]): IMessage {
  const released = status.state === 'paused' && status.paused !== null;
  const why = released ? idleLine(status.paused!) : null;
  const title = why ? 'Workspace paused: nobody was active' : released ? 'Workspace paused' : 'Checkpoint saved';
  const lines: string[] = why ? [why] : [];
  const recorded = released ? recordedResults(status.paused!) : [];
  const results: SavedSummary[] = recorded.length ? recorded : polled;
  if (results.length) {
    lines.push(...savedLines(results));
    lines.push(...skippedLines(results.flatMap(r => r.skipped)));
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
    lines.push(...documentLines(status.paused!.documents));
    const { release_backend: backend, gpus } = status.paused!;
    const terminals = status.terminals ?? [];
    if (terminals.length && backend !== 'none') {
      lines.push(`Not carried: ${plural(terminals.length, 'terminal')} (${terminals.join(', ')}) end with the pod.`);
    }
    lines.push(releaseDone(backend, gpus));
    lines.push(
      backend === 'none'
        ? 'Resume from the GPU menu or by clicking the status bar.'
        : 'Open this workspace again to resume.'
    );
  } else {
    lines.push('The kernels keep running.');
  }
  return { title, lines };
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
  const { data, modules } = usersNames(
    results.flatMap(r => r.restored),
    results.flatMap(r => r.modules ?? [])
  );
  const lines = [
    `Restored ${plural(data.length, 'object')} into ${plural(results.length, 'kernel')}` +
      (data.length ? `: ${listed(data)}` : '.')
  ];
  if (modules.length) {
    lines.push(`Modules, imported again: ${listed(modules)}.`);
  }
  for (const s of results.flatMap(r => r.not_restored)) {
    lines.push(`Not restored: ${s.name} (${s.type}): ${s.reason}`);
  }
  lines.push(...results.flatMap(r => r.packages ?? []).map(p => `Package: ${p}`));
  lines.push(...results.flatMap(r => r.paths ?? []).map(p => `Extra path: ${p}`));
  lines.push(...results.flatMap(r => r.warnings).map(w => `Warning: ${w}`));
  return { title: 'Workspace resumed', lines };
}

/** The toolbar badge of the notebook at `path`: "Paused" while a pause holds its kernel's
 * state (JupyterLab's own kernel indicator cannot say so), "Pausing" while one takes it. */
export function notebookBadge(status: IStatus | null, path: string): IMessage | null {
  if (!status) {
    return null;
  }
  const recorded = status.paused?.kernels.find(k => k.notebook === path);
  if (status.state === 'paused' && recorded) {
    return {
      title: 'Paused',
      lines: [
        `This notebook's kernel was stopped by the pause of ${status.paused!.paused_at}.`,
        `Its variables are kept in snapshot ${recorded.snapshot_id}; resume to get them back.`
      ]
    };
  }
  const operation = status.operation;
  const taking = status.kernels.find(k => k.notebook === path && operation?.kernels.includes(k.kernel_id));
  if (operation?.kind === 'pause' && taking) {
    return {
      title: operation.waiting_for ? 'Pause queued' : 'Pausing',
      lines: ["This notebook's kernel is being checkpointed; cells wait until it is done."]
    };
  }
  return null;
}

/** A path shortened from the left with an ellipsis: "…/project/train.ipynb". */
export function shortPath(path: string, max = 40): string {
  if (path.length <= max) {
    return path;
  }
  const parts = path.split('/');
  let tail = parts.pop()!;
  while (parts.length && parts[parts.length - 1].length + tail.length + 3 <= max) {
    tail = `${parts.pop()}/${tail}`;
  }
  return tail.length + 2 <= max ? `…/${tail}` : `…${tail.slice(tail.length - max + 1)}`;
}

/** Why a snapshot was taken, as a short tag: "paused", "auto", "shutdown", or null. */
export function snapshotTag(row: ISnapshotRow, status: IStatus | null): string | null {
  if (status?.paused?.kernels.some(k => k.snapshot_id === row.id)) {
    return 'paused';
  }
  if (row.reason === 'shutdown') {
    return 'shutdown';
  }
  if (row.reason === 'idle') {
    return 'auto';
  }
  return null;
}

/** A snapshot's label: its name, else "train.ipynb · 5 min ago · 512 MiB · paused". */
export function snapshotLabel(row: ISnapshotRow, status: IStatus | null, now: number): string {
  if (row.name) {
    return row.name;
  }
  if (row.error) {
    return `Unreadable snapshot ${row.id}`;
  }
  const parts = [
    row.notebook ? shortPath(row.notebook, 32) : 'no notebook',
    formatAge(row.created, now),
    formatBytes(row.bytes)
  ];
  const tag = snapshotTag(row, status);
  return (tag ? [...parts, tag] : parts).join(' · ');
}
