/**
 * One notification per operation, updated in place and closed when the operation ends.
 *
 * Call order: `new OperationNotifier(model, sink, cancel)`; it follows the model's signals
 * until `dispose()`. Invariant: at most one notification of ours is open, it belongs to the
 * operation in flight (the one `status.operation` names), and it is dismissed as soon as a
 * status without that operation arrives, before the message saying how it ended is shown.
 * `sink` is JupyterLab's `Notification` (an interface here so node's tests can drive it).
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
  dismiss(id: string): void;
}

export class OperationNotifier {
  constructor(
    private readonly model: StatusModel,
    private readonly sink: INotificationSink,
    private readonly cancel: () => void
  ) {
    model.finished.connect(this.onFinished, this);
    model.changed.connect(this.onChanged, this);
  }

  /** The id of the open notification, or null. */
  get openId(): string | null {
    return this._id;
  }

  dispose(): void {
    this.model.finished.disconnect(this.onFinished, this);
    this.model.changed.disconnect(this.onChanged, this);
    this.close();
  }

  private onFinished(_: StatusModel, __: IFinished): void {
    this.close();
  }

  private onChanged(_: StatusModel, status: IStatus | null): void {
    if (!status) {
      return; // a failed poll says nothing about the operation: keep what is shown
    }
    const operation = status.operation;
    if (!operation) {
      this.close();
      return;
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
      this.close();
      this._id = this.sink.emit(view.label, 'in-progress', { autoClose: false, actions });
      this._operation = operation.id;
    }
    this._shown = shown;
  }

  private close(): void {
    if (this._id !== null) {
      this.sink.dismiss(this._id);
    }
    this._id = null;
    this._operation = null;
    this._shown = '';
  }

  private _id: string | null = null;
  private _operation: string | null = null;
  private _shown = '';
}
