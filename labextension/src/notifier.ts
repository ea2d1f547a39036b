/**
 * One notification per operation, updated in place and closed when the operation ends; then,
 * and only then, the message saying how it ended.
 *
 * Call order: `new OperationNotifier(model, sink, cancel, tell)`; it follows the model's signals
 * until `dispose()`. Invariants: at most one notification of ours is open, it belongs to the
 * operation in flight (the one `status.operation` names), and it is dismissed as soon as a
 * status without that operation arrives. When the model reports an operation `finished`, the
 * notifier dismisses its notification, awaits the sink's word that it is off the screen, and
 * only then calls `tell` (which shows the final message): the two are never on screen together.
 * Messages keep the operations' order: a message whose toast left the screen after a later
 * operation ended is never shown (a stale "Workspace resumed" over "Paused"), and the message
 * `tell` returned is closed as soon as a later operation is in flight or has ended.
 * `sink` is JupyterLab's `Notification` (toasts.ts; an interface here so node's tests drive it).
 */

import { describeStatus } from './describe';
import { IFinished, StatusModel } from './model';
import { IStatus } from './types';

export interface INotificationAction {
  label: string;
  caption?: string;
  displayType?: 'default' | 'accent' | 'warn' | 'link';
  callback: (event: MouseEvent) => void;
}

/** The part of JupyterLab's `Notification` namespace this uses. */
export interface INotificationSink {
  emit(
    message: string,
    type: 'in-progress',
    options: { autoClose: false; actions: INotificationAction[] }
  ): string;
  update(args: {
    id: string;
    message: string;
    type: 'in-progress';
    autoClose: false;
    actions: INotificationAction[];
  }): boolean;
  /** Close `id`; resolves once it is off the screen (never rejects). */
  dismiss(id: string): Promise<void>;
}

/** What `tell` shows, closed when a later operation comes. */
export interface IClosable {
  close(): void;
}

export class OperationNotifier {
  constructor(
    private readonly model: StatusModel,
    private readonly sink: INotificationSink,
    private readonly cancel: () => void,
    private readonly tell: (finished: IFinished) => IClosable | void
  ) {
    model.finished.connect(this.onFinished, this);
    model.changed.connect(this.onChanged, this);
  }

  /** The id of the open notification, or null. */
  get openId(): string | null {
    return this._id;
  }

  dispose(): void {
    this._finishedCount++; // a message still waiting for its toast to leave is not shown
    this.model.finished.disconnect(this.onFinished, this);
    this.model.changed.disconnect(this.onChanged, this);
    void this.close();
  }

  /** Dismiss the open notification; resolves once the last one dismissed is off the screen. */
  close(): Promise<void> {
    if (this._id !== null) {
      this._closing = this.sink.dismiss(this._id);
    }
    this._id = null;
    this._operation = null;
    this._shown = '';
    return this._closing;
  }

  private onFinished(_: StatusModel, finished: IFinished): void {
    const turn = ++this._finishedCount;
    this.closeMessage();
    void this.close().then(() => {
      if (turn === this._finishedCount) {
        this._message = this.tell(finished) ?? null;
        this._messageFor = finished.operation.id;
      }
    });
  }

  /** Take the message of an earlier operation off the screen. */
  private closeMessage(): void {
    this._message?.close();
    this._message = null;
    this._messageFor = null;
  }

  private onChanged(_: StatusModel, status: IStatus | null): void {
    if (!status) {
      return; // a failed poll says nothing about the operation: keep what is shown
    }
    const operation = status.operation;
    if (!operation) {
      void this.close();
      return;
    }
    if (this._messageFor !== null && this._messageFor !== operation.id) {
      this.closeMessage(); // a later operation is in flight
    }
    const view = describeStatus(status);
    const actions: INotificationAction[] = view.cancellable
      ? [{ label: 'Cancel', caption: 'Cancel this pause', displayType: 'warn', callback: this.cancel }]
      : [];
    const shown = `${view.label}|${actions.length}`;
    if (this._id !== null && this._operation === operation.id) {
      if (shown !== this._shown) {
        this.sink.update({ id: this._id, message: view.label, type: 'in-progress', autoClose: false, actions });
      }
    } else {
      void this.close();
      this._id = this.sink.emit(view.label, 'in-progress', { autoClose: false, actions });
      this._operation = operation.id;
    }
    this._shown = shown;
  }

  private _id: string | null = null;
  private _operation: string | null = null;
  private _shown = '';
  private _closing: Promise<void> = Promise.resolve();
  private _finishedCount = 0;
  private _message: IClosable | null = null;
  private _messageFor: string | null = null;
}
