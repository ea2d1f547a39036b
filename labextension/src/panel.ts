/**
 * The Snapshots side panel: every snapshot of the workspace (name, age, notebook, size,
 * verdict) with Restore and Delete (after a confirmation). It reloads when shown, on its Refresh
 * button and whenever the newest snapshot changes; a failed load shows the server's message.
 */

import { Widget } from '@lumino/widgets';

import { snapshotLabel } from './describe';
import { confirmDelete, el, verdictBadge } from './dialogs';
import { formatAge, formatBytes, plural } from './format';
import { StatusModel } from './model';
import { ISnapshotRow } from './types';

export interface ISnapshotActions {
  list(): Promise<ISnapshotRow[]>;
  restore(snapshot: ISnapshotRow): Promise<void>;
  remove(snapshot: ISnapshotRow): Promise<void>;
  report(title: string, error: unknown): void;
}

export class SnapshotsPanel extends Widget {
  constructor(
    private readonly model: StatusModel,
    private readonly actions: ISnapshotActions
  ) {
    super();
    this.id = 'jp-gkeresume-snapshots';
    this.addClass('jp-gkeresume-panel');
    this.title.caption = 'Snapshots of this workspace';
    const header = el('div', 'jp-gkeresume-panel-header');
    const refresh = el('button', 'jp-Button jp-mod-styled jp-mod-reject', 'Refresh');
    refresh.title = 'Reload the list of snapshots';
    refresh.setAttribute('aria-label', refresh.title);
    refresh.addEventListener('click', () => void this.reload());
    header.append(el('h2', '', 'Snapshots'), refresh);
    this.node.append(header, this._message, this._table);
    this._message.setAttribute('role', 'status');
    model.changed.connect(this.onStatus, this);
  }

  async reload(): Promise<void> {
    this._message.textContent = 'Loading…';
    try {
      this.render(await this.actions.list());
      this._message.textContent = this._rows.length ? '' : 'No snapshot yet: Pause or Checkpoint.';
    } catch (error) {
      this._message.textContent = `Could not list snapshots: ${(error as Error).message}`;
    }
  }

  dispose(): void {
    this.model.changed.disconnect(this.onStatus, this);
    super.dispose();
  }

  protected onAfterShow(): void {
    void this.reload();
  }

  private onStatus(): void {
    const newest = this.model.status?.last_snapshot?.id ?? null;
    if (newest !== this._newest) {
      this._newest = newest;
      if (this.isVisible) {
        void this.reload();
      }
    }
  }

  private render(rows: ISnapshotRow[]): void {
    this._rows = rows;
    const now = Date.now();
    this._table.replaceChildren();
    for (const snapshot of rows) {
      const item = el('li', 'jp-gkeresume-snapshot');
      item.dataset.id = snapshot.id;
      const label = snapshotLabel(snapshot, this.model.status, now);
      const title = el('div', 'jp-gkeresume-snapshot-title', label);
      title.title = snapshot.id;
      item.append(title);
      if (snapshot.error) {
        item.append(el('div', 'jp-gkeresume-warning', `Unreadable: ${snapshot.error}`));
      } else {
        const meta = el(
          'div',
          'jp-gkeresume-snapshot-meta',
          `${formatAge(snapshot.created, now)} · ${snapshot.notebook ?? 'no notebook'} · ` +
            `${formatBytes(snapshot.bytes)} · ${plural(snapshot.objects, 'object')}` +
            (snapshot.skipped ? ` (${snapshot.skipped} not saved)` : '')
        );
        meta.title = snapshot.created ?? '';
        const badge = verdictBadge(snapshot.verdict?.level ?? null);
        badge.title = snapshot.verdict?.reasons.join('\n') || 'Same environment';
        item.append(meta, badge);
      }
      const buttons = el('div', 'jp-gkeresume-snapshot-actions');
      const restore = this.button('Restore', `Restore snapshot ${label}`, async () => {
        await this.actions.restore(snapshot);
      });
      restore.disabled =
        !!snapshot.error || snapshot.verdict?.level === 'incompatible' || this.model.busy;
      const remove = this.button('Delete', `Delete snapshot ${label}`, async () => {
        if (await confirmDelete(snapshot)) {
          await this.actions.remove(snapshot);
          await this.reload();
        }
      });
      buttons.append(restore, remove);
      item.append(buttons);
      this._table.append(item);
    }
  }

  private button(text: string, title: string, run: () => Promise<void>): HTMLButtonElement {
    const button = el('button', 'jp-Button jp-mod-styled jp-mod-small', text);
    button.title = title;
    button.setAttribute('aria-label', title);
    button.addEventListener('click', () => {
      run().catch(error => this.actions.report(`${text} failed`, error));
    });
    return button;
  }

  private _message = el('div', 'jp-gkeresume-panel-message');
  private _table = el('ul', 'jp-gkeresume-snapshots');
  private _rows: ISnapshotRow[] = [];
  private _newest: string | null = null;
}
