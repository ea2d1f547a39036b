/**
 * Controller: what the commands do. Pause saves every dirty document first, then asks the server
 * to pause and follows the operation; when an operation this page followed is over, the user is
 * told what was saved or restored, or why it failed (the server's own message, never swallowed).
 *
 * While an operation runs, one notification (OperationNotifier) follows it in place; when it
 * ends, the notifier closes it, awaits its leaving the screen, and only then has the message
 * shown (`tell`).
 *
 * Call order: `new Controller(...)`, `start()` (first status; offers to resume a paused
 * workspace once per page load), then the command methods.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification, showErrorMessage } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookTracker } from '@jupyterlab/notebook';

import { api } from './api';
import { IShownMessage, askResume, showMessage } from './dialogs';
import { pauseSummary, resumeSummary } from './describe';
import { openDocuments } from './documents';
import { APIError } from './http';
import { saveDocuments } from './labsaves';
import { IFinished, StatusModel } from './model';
import { OperationNotifier } from './notifier';
import { resumeOffer } from './offer';
import { ServerSettings } from './settings';
import { labNotifications } from './toasts';
import { IResumeRequest, ISnapshotRow } from './types';

export class Controller {
  constructor(
    private readonly app: JupyterFrontEnd,
    private readonly docManager: IDocumentManager,
    private readonly notebooks: INotebookTracker | null,
    readonly model: StatusModel,
    private readonly settings: ServerSettings
  ) {
    this._notifier = new OperationNotifier(
      model,
      labNotifications,
      () => void this.run('Cancel failed', () => this.cancel()),
      finished => this.tell(finished)
    );
  }

  /** First status, then the resume dialog if the workspace is paused. */
  async start(): Promise<void> {
    const status = await this.model.start();
    if (status?.paused && (status.state === 'paused' || status.state === 'failed')) {
      await this.offerResume();
    }
  }

  /** Pause the workspace: save, checkpoint every kernel, release the GPU. */
  async pause(): Promise<void> {
    this.refuseWhileBusy();
    await this.saveAll();
    const reply = await api.pause({});
    await this.model.follow(reply.operation);
  }

  /** Cancel the pause in flight; too late (409: it is releasing) is said with the reason. */
  async cancel(): Promise<void> {
    this._cancelled = this.model.status?.operation?.id ?? null;
    try {
      await api.cancel();
    } catch (error) {
      if (error instanceof APIError && error.status === 409) {
        throw new Error(`The pause can no longer be cancelled: ${error.message}`);
      }
      throw error;
    }
    await this.model.refresh();
  }

  /** Checkpoint the current notebook's kernel; it keeps running. */
  async checkpoint(): Promise<void> {
    this.refuseWhileBusy();
    const panel = this.notebooks?.currentWidget;
    const kernel = panel?.sessionContext.session?.kernel?.id;
    if (!panel || !kernel) {
      throw new Error('Open a notebook with a running kernel to checkpoint it.');
    }
    await this.saveContext(panel.context);
    const reply = await api.pause({ kernels: [kernel], release: false });
    await this.model.follow(reply.operation);
  }

  /** The resume dialog for a paused workspace; else a pointer to the Snapshots panel. */
  async offerResume(): Promise<void> {
    const status = await this.model.refresh();
    if (!status) {
      throw this.model.error ?? new Error('The status is not available.');
    }
    if (!status.paused) {
      Notification.info('Nothing is paused here: pick a snapshot to restore under Snapshots.', {
        autoClose: 5000
      });
      await this.app.commands.execute('gkeresume:snapshots');
      return;
    }
    const offer = resumeOffer(status, await api.snapshots())!;
    await this.settings.ready;
    const answer = await askResume(
      offer,
      this.settings.checkpointOnShutdown,
      this.settings.serverKnows
    );
    if (answer.stopCheckpointOnShutdown) {
      await this.settings.setCheckpointOnShutdown(false);
    }
    if (answer.choice === 'fresh') {
      await api.discardPaused();
      await this.model.refresh();
      Notification.success(
        'Started fresh: the pause was discarded; the snapshots are still under Snapshots.',
        { autoClose: 5000 }
      );
      return;
    }
    const requests: Record<string, IResumeRequest | null> = {
      full: { mode: 'full' },
      compatible: { mode: 'partial', only: offer.compatibleObjects ?? [] },
      later: null
    };
    const request = requests[answer.choice];
    if (request) {
      await this.model.follow((await api.resume(request)).operation);
    }
  }

  /** Restore one snapshot (into its notebook's kernel). */
  async restore(snapshot: ISnapshotRow): Promise<void> {
    this.refuseWhileBusy();
    await this.model.follow((await api.resume({ snapshot: snapshot.id })).operation);
  }

  /** Run `action`, showing any failure with its message. */
  async run(title: string, action: () => Promise<void>): Promise<void> {
    try {
      await action();
    } catch (error) {
      await showErrorMessage(title, error as Error);
    }
  }

  dispose(): void {
    this._notifier.dispose();
  }

  private refuseWhileBusy(): void {
    const operation = this.model.status?.operation;
    if (operation) {
      throw new Error(`A ${operation.kind} is in progress (${operation.id}); wait for it to end.`);
    }
  }

  /** Save every open document first; a document that cannot be saved stops the pause. */
  private async saveAll(): Promise<void> {
    const { not_saved } = await saveDocuments(openDocuments(this.app, this.docManager));
    if (not_saved.length) {
      throw new Error(
        `Not paused: ${not_saved.map(n => `${n.path} (${n.reason})`).join(', ')} could not be saved.`
      );
    }
  }

  private async saveContext(context: DocumentRegistry.Context): Promise<void> {
    if (context.model.dirty && !context.model.readOnly) {
      await context.save();
    }
  }

  /** The message saying how an operation ended (the notifier calls it once its toast left,
   * and closes it when a later operation comes). */
  private tell({ operation, status, results }: IFinished): IShownMessage {
    if (operation.kind === 'resume') {
      return showMessage(resumeSummary(status, operation));
    }
    const failed =
      status.state !== 'paused' &&
      status.last_error !== null &&
      ['pause', 'release'].includes(status.last_error.operation);
    if (operation.id === this._cancelled && status.state !== 'paused') {
      return showMessage({
        title: 'Pause cancelled',
        lines: ['Nothing was released: your kernels go on as they were.']
      });
    }
    if (failed) {
      return showMessage({
        title: 'Pause failed',
        lines: [status.last_error!.message, 'Nothing was released: your kernels are as they were.']
      });
    }
    return showMessage(pauseSummary(status, results));
  }

  private readonly _notifier: OperationNotifier;
  private _cancelled: string | null = null;
}
