/**
 * The resume dialog's content for a paused workspace (pure): when, size, the estimated time
 * (the server's, learned from this store's recorded pauses and resumes; none before the first:
 * a constant rate would be a guess about some other store), the worst verdict with every
 * reason, and which choices make sense.
 */

import { aboutDuration, formatBytes } from './format';
import { idleLine, recordedResults, savedLines, skippedLines } from './describe';
import { IPausedRecord, ISnapshotRow, IStatus, IVerdict, LEVELS, Level } from './types';

export interface IResumeOffer {
  pausedAt: string;
  reason: string | null;
  /** Why it paused, when nobody was active (`idleLine`); null for any other pause. */
  why: string | null;
  /** What the pause saved ("Saved 12 objects (677 MiB, ...): opt, df, ..."), when the record
   * names it. */
  saved: string | null;
  notebooks: string[];
  bytes: number;
  /** From this store's recorded operations (the server's `resume_estimate_seconds`); null
   * before the first. */
  estimateSeconds: number | null;
  /** The pause was the shutdown checkpoint: stopping the server paused the workspace. */
  pausedByShutdown: boolean;
  /** The worst verdict over the paused snapshots; null when none could be read. */
  level: Level | null;
  reasons: string[];
  objectsAtRisk: Record<string, string>;
  /** Snapshots of the record that could not be read (signature, missing), with the error. */
  problems: string[];
  /** Packages installed in the paused sessions that the resume would install here. */
  packages: string[];
  /** What the pause could not save, as the paused record names it (from each snapshot's
   * manifest): said before Resume is clicked. */
  notComingBack: string[];
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
  const packages: string[] = [];
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
      packages.push(...(row.packages ?? []));
    }
  }
  const verdict = worstVerdict(verdicts);
  const bytes = record.kernels.reduce((n, k) => n + k.bytes_total, 0);
  const estimate = status.resume_estimate_seconds;
  const learned = typeof estimate === 'number' && estimate > 0 ? estimate : null;
  const level = verdict?.level ?? null;
  const usable = problems.length === 0 && level !== null && level !== 'incompatible';
  const atRisk = verdict?.objects_at_risk ?? {};
  const compatible = namesKnown ? [...new Set(saved)].filter(n => !(n in atRisk)) : null;
  return {
    pausedAt: record.paused_at,
    reason: record.reason,
    why: idleLine(record),
    saved: recordedResults(record).length ? savedLines(recordedResults(record))[0] : null,
    notebooks: record.kernels.map(k => k.notebook ?? `(kernel ${k.kernel_name ?? '?'})`),
    bytes,
    estimateSeconds: learned,
    pausedByShutdown: record.reason === 'shutdown',
    level,
    reasons: verdict?.reasons ?? [],
    objectsAtRisk: atRisk,
    problems,
    packages: [...new Set(packages)],
    notComingBack: notComingBack(record, byId),
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

/** What will not come back: the record's skipped entries (each kernel's, from its checkpoint
 * and manifest); for a kernel whose entry predates them, its snapshot row's count. */
function notComingBack(record: IPausedRecord, rows: Map<string, ISnapshotRow>): string[] {
  const lines = skippedLines(record.kernels.flatMap(k => k.skipped ?? []));
  for (const kernel of record.kernels) {
    const count = rows.get(kernel.snapshot_id)?.skipped ?? 0;
    if (!kernel.skipped && count) {
      const objects = count === 1 ? '1 object was' : `${count} objects were`;
      lines.push(`${kernel.notebook ?? kernel.snapshot_id}: ${objects} not saved.`);
    }
  }
  return lines;
}

/** One line for the resume dialog: "about 12 s for 2.0 GiB (measured on this store)". */
export function estimateText(offer: IResumeOffer): string {
  const size = formatBytes(offer.bytes);
  return offer.estimateSeconds === null
    ? `${size} (no estimate yet: the first pause or resume here measures this store)`
    : `${aboutDuration(offer.estimateSeconds)} for ${size} (measured on this store)`;
}
