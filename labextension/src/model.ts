/**
 * StatusModel: the lab's one view of the server's pause/resume status.
 *
 * Call order: `new StatusModel(fetchStatus)`, connect to its signals, `start()`; `refresh()` after
 * starting an operation; `dispose()` at the end. One `@lumino/polling` `Poll` asks GET status
 * every `fastMs` while an operation is in flight (the status bar then moves at least twice a
 * second), every `queuedMs` while a queued pause waits for a cell, else every `slowMs`; it stands
 * by while the page is hidden and nothing is in flight, and backs off after a failure (kept in
 * `error` and signalled). Before `start()` nothing is scheduled: `refresh()` polls once.
 * Because the server keeps the state, a reloaded page picks up whatever is in flight.
 *
 * Invariant: `finished` fires once per operation this page saw in flight, with the checkpoint
 * results seen while it ran (kernels stopped by a pause no longer report them), and once for a
 * pause it did not see in flight (an idle pause between two polls) when its paused record
 * appears in a status after one without it; a page opened on a paused workspace gets the
 * resume dialog instead.
 */

import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { ACTIVE_STATES, checkpointResults } from './describe';
import { ICheckpointResult, IOperation, IStatus } from './types';

export interface IFinished {
  operation: IOperation;
  status: IStatus;
  /** Checkpoint results of a pause, by kernel id (empty for a resume). */
  results: ICheckpointResult[];
}

export class StatusModel {
  constructor(
    private readonly fetchStatus: () => Promise<IStatus>,
    readonly fastMs = 400,
    readonly slowMs = 5000,
    readonly queuedMs = 2000
  ) {
    this._poll = new Poll({
      auto: false,
      name: 'gkeresume:status',
      factory: () => this.poll(),
      frequency: this.frequency(),
      standby: () => (this.busy ? 'never' : 'when-hidden')
    });
  }

  get status(): IStatus | null {
    return this._status;
  }

  /** The last poll's failure (the server's message), or null once a poll succeeds again. */
  get error(): Error | null {
    return this._error;
  }

  /** Emitted after every poll, successful or not. */
  get changed(): ISignal<this, IStatus | null> {
    return this._changed;
  }

  /** Emitted when an operation this page saw in flight is over. */
  get finished(): ISignal<this, IFinished> {
    return this._finished;
  }

  get busy(): boolean {
    const s = this._status;
    return !!s && (s.operation !== null || ACTIVE_STATES.has(s.state));
  }

  /** Start polling; resolves with the first status (null if it could not be read). */
  start(): Promise<IStatus | null> {
    this._started = true;
    return this.refresh();
  }

  /** Poll now, whatever the Poll is doing, then let it keep its pace from here. Resolves
   * with the status, or null on failure. */
  async refresh(): Promise<IStatus | null> {
    await this.poll().catch(() => undefined);
    if (this._started) {
      void this._poll.schedule({ interval: this._poll.frequency.interval, phase: 'refreshed' });
    }
    return this._error ? null : this._status;
  }

  /** One GET status (the Poll's factory); rejects on failure so the Poll backs off. An answer
   * is dropped when a later-sent one was already taken in, or it was sent before `follow()`. */
  private async poll(): Promise<void> {
    const seq = ++this._seq;
    try {
      const status = await this.fetchStatus();
      if (seq > this._ignoreUpTo && seq > this._applied) {
        this._applied = seq;
        this.update(status);
      }
      this._error = null;
    } catch (error) {
      this._error = error instanceof Error ? error : new Error(String(error));
    }
    this._poll.frequency = this.frequency();
    this._changed.emit(this._error ? null : this._status);
    if (this._error) {
      throw this._error;
    }
  }

  /** The pace for the next poll: never before `start()`, fast while busy. */
  private frequency(): IPoll.Frequency {
    if (!this._started) {
      return { interval: Poll.NEVER, backoff: false, max: Poll.NEVER };
    }
    const waiting = !!this._status?.operation?.waiting_for;
    const interval = this.busy ? (waiting ? this.queuedMs : this.fastMs) : this.slowMs;
    return { interval, backoff: true, max: Math.max(interval, 60_000) };
  }

  /** Follow `operation`, just started by this page, then poll: its end is reported even if it
   * is over before the next poll, and answers to polls sent before it started are dropped. */
  follow(operation: IOperation): Promise<IStatus | null> {
    this._ignoreUpTo = this._seq;
    this.track(operation);
    return this.refresh();
  }

  private track(operation: IOperation, before: IStatus | null = this._status): void {
    this._operation = operation;
    this._results.clear();
    // Results already there are from earlier operations: never report them as this one's.
    const earlier = checkpointResults(before?.kernels ?? []).values();
    this._earlier = new Set([...earlier].map(r => r.snapshot_id));
  }

  /** Take in a new status: remember results of the operation in flight, detect its end. */
  update(status: IStatus): void {
    const before = this._status;
    this._status = status;
    const seen = this._operation;
    if (seen && status.operation?.id !== seen.id) {
      this.collect(status, seen);
      const results = seen.kind === 'pause' ? [...this._results.values()] : [];
      this._operation = null;
      this._results.clear();
      this._finished.emit({ operation: seen, status, results });
    }
    const record = status.paused;
    const unseen =
      !seen && !status.operation && status.state === 'paused' && record && before &&
      before.paused?.paused_at !== record.paused_at && record.paused_at !== this._toldPausedAt;
    if (seen && record) {
      this._toldPausedAt = record.paused_at; // a pause it followed: told already
    }
    if (unseen) {
      this._toldPausedAt = record.paused_at;
      const operation: IOperation = {
        id: `paused-${record.paused_at}`,
        kind: 'pause',
        started: status.since,
        reason: record.reason,
        release: true,
        mode: null,
        kernels: record.kernels.map(k => k.kernel_id)
      };
      this._finished.emit({ operation, status, results: [] });
    }
    if (status.operation && this._operation?.id !== status.operation.id) {
      this.track(status.operation, before);
    } else if (status.operation) {
      this._operation = status.operation; // same operation, newer details (kernels started)
    }
    if (this._operation) {
      this.collect(status, this._operation);
    }
  }

  private collect(status: IStatus, operation: IOperation): void {
    if (operation.kind !== 'pause') {
      return;
    }
    for (const [id, result] of checkpointResults(status.kernels)) {
      if (operation.kernels.includes(id) && !this._earlier.has(result.snapshot_id)) {
        this._results.set(id, result);
      }
    }
  }

  dispose(): void {
    // Stopping clears the Poll's pending timer (its dispose() leaves it set, so a disposed
    // model kept the event loop alive up to `slowMs` or a 60 s backoff), then dispose.
    void this._poll.stop();
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _status: IStatus | null = null;
  private _error: Error | null = null;
  private _operation: IOperation | null = null;
  private _results = new Map<string, ICheckpointResult>();
  private _earlier = new Set<string>();
  private _seq = 0;
  private _ignoreUpTo = 0;
  private _applied = 0;
  private _started = false;
  private _toldPausedAt: string | null = null;
  private readonly _poll: Poll;
  private _changed = new Signal<this, IStatus | null>(this);
  private _finished = new Signal<this, IFinished>(this);
}
