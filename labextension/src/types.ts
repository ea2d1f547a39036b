/**
 * The server's JSON, as TypeScript types. The contract is docs/api.md; `State` mirrors the Python
 * enum in jupyter_gkeresume/states.py string for string (tests/test_ui_unit.py checks that).
 */

import { IDocumentsReport } from './labsaves';

/** Every state a kernel or the workspace can be in. */
export const STATES = [
  'running',
  'pausing',
  'releasing',
  'paused',
  'waiting_for_resources',
  'restoring',
  'ready',
  'failed'
] as const;

export type State = (typeof STATES)[number];

/** Compatibility levels, best first (jupyter_gkeresume/snapshot/compat.py LEVELS). */
export const LEVELS = ['exact', 'portable', 'partial', 'incompatible'] as const;

export type Level = (typeof LEVELS)[number];

/** A progress report's phase: the kernel's (hashing ... restoring, done) and the server's own
 * (verifying; releasing, starting and unpickling where the server reports them). */
export type Phase =
  | 'hashing'
  | 'writing'
  | 'committing'
  | 'verifying'
  | 'releasing'
  | 'starting'
  | 'installing'
  | 'reading'
  | 'restoring'
  | 'unpickling'
  | 'done';

export interface IProgress {
  phase: Phase;
  done_bytes: number;
  total_bytes: number;
  rate: number;
  seconds: number;
}

export interface ISkipped {
  name: string;
  type: string;
  reason: string;
  /** A part of the saved object `name` that comes back as a placeholder (kernel_hooks
   * results.Skipped.inside); absent from older kernels. */
  inside?: boolean;
}

export interface IVerdict {
  level: Level;
  reasons: string[];
  objects_at_risk: Record<string, string>;
}

export interface ICheckpointResult {
  snapshot_id: string;
  name: string | null;
  bytes_total: number;
  bytes_new: number;
  bytes_reused: number;
  seconds: number;
  saved: string[];
  skipped: ISkipped[];
  timings: Record<string, number>;
  warnings: string[];
  /** The names in `saved` bound to modules (absent from older kernels). */
  modules?: string[];
}

export interface IResumeResult {
  snapshot_id: string;
  restored: string[];
  not_restored: ISkipped[];
  warnings: string[];
  verdict: IVerdict | Record<string, never>;
  bytes_read: number;
  seconds: number;
  /** One line per package installed in the session it put back (or could not). */
  packages?: string[];
  /** One line per directory of `c.GkeResume.extra_paths` it put back (or could not). */
  paths?: string[];
  /** The names in `restored` bound to modules (absent from older kernels). */
  modules?: string[];
}

/** A queued pause waits for a running cell (`operation.waiting_for`). */
export interface IWaitingFor {
  kernel_id: string;
  notebook: string | null;
  execution_count: number | null;
  running_seconds: number | null;
}

export interface IOperation {
  id: string;
  kind: 'pause' | 'resume';
  started: number;
  reason: string | null;
  release: boolean | null;
  mode: ResumeMode | null;
  kernels: string[];
  /** `POST cancel` would still stop it (a pause that has not reached `releasing`). */
  cancellable?: boolean;
  /** Set while a queued pause waits for a running cell to end. */
  waiting_for?: IWaitingFor | null;
  /** Expected whole duration in seconds, learned from this workspace's recorded operations. */
  estimate_seconds?: number | null;
  /** A pause: what the connected labs saved before the hold (null until they answered). */
  documents?: IDocumentsReport | null;
  /** An idle pause: since when nobody was active. */
  idle?: IIdleNote | null;
}

export interface IKernelStatus {
  kernel_id: string;
  kernel_name: string | null;
  notebook: string | null;
  execution_state: string | null;
  state: State;
  reason: string | null;
  since: number;
  progress: IProgress | null;
  snapshot_id: string | null;
  result: ICheckpointResult | IResumeResult | null;
}

/** A row of GET snapshots (`SnapshotSummary.to_dict()`); unreadable ones carry only `error`. */
export interface ISnapshotRow {
  id: string;
  name: string | null;
  created: string | null;
  notebook: string | null;
  bytes: number;
  objects: number;
  skipped: number;
  verdict: IVerdict | null;
  error: string | null;
  /** Names of the saved objects, where the server lists them (needed to resume only the
   * compatible ones). */
  saved?: string[];
  /** Why the snapshot was taken, where the server lists it: "user" (pause button, %pause),
   * "idle", "shutdown", "checkpoint" (%checkpoint); absent for older snapshots. */
  reason?: string | null;
  /** Packages installed in its session that a resume here would install ("name version"). */
  packages?: string[];
}

export interface IPausedKernel {
  kernel_id: string;
  kernel_name: string | null;
  notebook: string | null;
  snapshot_id: string;
  bytes_total: number;
  /** What the kernel's checkpoint saved and skipped (absent in records from older servers). */
  bytes_new?: number;
  saved?: string[];
  skipped?: ISkipped[];
  /** The PYTHONHASHSEED its resume starts the kernel with (absent: random, or an older record). */
  hash_seed?: string;
  /** The names in `saved` bound to modules (absent in older records). */
  modules?: string[];
}

/** An idle pause's note (jupyter_gkeresume/idle.py `IdleWatcher.note`): nobody was active
 * `since` (ISO 8601 UTC) for `seconds` when it began, with the idle `timeout` (seconds). */
export interface IIdleNote {
  since: string;
  seconds: number;
  timeout: number;
}

/** The paused record (records/paused.json in the store). */
export interface IPausedRecord {
  version: number;
  workspace: string;
  paused_at: string;
  reason: string | null;
  release_backend: string;
  gpus: number;
  kernels: IPausedKernel[];
  /** What the connected labs saved before the pause (absent in older records). */
  documents?: IDocumentsReport | null;
  /** An idle pause: since when nobody was active (null otherwise; absent in older records). */
  idle?: IIdleNote | null;
}

export interface ILastError {
  operation: 'pause' | 'resume' | 'release' | 'shutdown' | 'startup';
  message: string;
  at: number;
}

/** GET status. */
export interface IStatus {
  workspace: string;
  store: string;
  release_backend: string;
  state: State;
  reason: string | null;
  since: number;
  operation: IOperation | null;
  kernels: IKernelStatus[];
  last_snapshot: Partial<ISnapshotRow> | null;
  paused: IPausedRecord | null;
  last_error: ILastError | null;
  /** Expected seconds to resume the paused record, learned from this workspace's resumes. */
  resume_estimate_seconds?: number | null;
  /** The server's open terminals: no snapshot holds them (absent from older servers). */
  terminals?: string[];
}

/** PUT settings: what the lab's settings tell the server. */
export interface IServerSettings {
  checkpoint_on_shutdown: boolean;
}

export type ResumeMode = 'full' | 'partial' | 'files-only';

export interface IPauseRequest {
  kernels?: string[];
  release?: boolean;
  name?: string;
  /** Checkpoint a busy kernel once its running cell ends (default: a busy kernel is a 409). */
  when_idle?: boolean;
}

export interface IResumeRequest {
  snapshot?: string;
  mode?: ResumeMode;
  only?: string[];
  kernel?: string;
}

export interface IPauseReply {
  operation: IOperation;
  state: State;
}

export interface IResumeReply {
  operation: IOperation;
  state: State;
  joined: boolean;
}

export interface ISnapshotsReply {
  snapshots: ISnapshotRow[];
}
