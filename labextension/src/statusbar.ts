/**
 * The status bar item: the workspace's state in one sentence, a progress bar for every operation
 * in flight, and a Cancel button while the pause can still be cancelled. It renders whatever the
 * StatusModel last saw, so it survives a page reload; a failed poll is shown as such ("Status
 * unavailable"), never as a stale state. The bar never moves backwards within one operation.
 */

import { Widget } from '@lumino/widgets';

import { describeStatus } from './describe';
import { StatusModel } from './model';

export class StatusItem extends Widget {
  constructor(
    private readonly model: StatusModel,
    private readonly onActivate: () => void,
    private readonly onCancel: () => void
  ) {
    super();
    this.addClass('jp-gkeresume-status');
    this.node.append(this._button, this._cancel);
    this._button.type = 'button';
    this._button.className = 'jp-gkeresume-status-button';
    this._button.setAttribute('aria-live', 'polite');
    this._button.append(this._dot, this._label, this._bar);
    this._dot.className = 'jp-gkeresume-dot';
    this._label.className = 'jp-gkeresume-label';
    this._bar.className = 'jp-gkeresume-progress';
    this._bar.max = 1;
    this._cancel.type = 'button';
    this._cancel.className = 'jp-gkeresume-cancel';
    this._cancel.textContent = 'Cancel';
    this._cancel.title = 'Cancel this pause: the kernels go on as before';
    this._cancel.setAttribute('aria-label', this._cancel.title);
    this._button.addEventListener('click', () => this.onActivate());
    this._cancel.addEventListener('click', () => this.onCancel());
    model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const status = this.model.status;
    const node = this.node;
    this._cancel.hidden = true;
    if (this.model.error || !status) {
      const why = this.model.error?.message ?? 'loading';
      // Once paused, a release backend may stop this very server: say so, not "broken".
      const gone = this.model.error && status?.state === 'paused';
      node.dataset.state = gone ? 'paused' : 'unknown';
      node.dataset.tone = gone ? 'good' : this.model.error ? 'bad' : 'idle';
      this._label.textContent = gone
        ? 'Paused (server stopped)'
        : this.model.error
          ? 'Pause: status unavailable'
          : 'Pause: …';
      this._button.title = `Pause/resume status: ${why}`;
      this._button.setAttribute('aria-label', this._button.title);
      this._bar.hidden = true;
      return;
    }
    const view = describeStatus(status);
    node.dataset.state = view.state;
    node.dataset.tone = view.tone;
    this._label.textContent = view.label;
    this._button.title = `${view.title}\n(click: ${view.state === 'paused' ? 'resume' : 'snapshots'})`;
    this._button.setAttribute('aria-label', view.title);
    this._cancel.hidden = !view.cancellable;
    this._bar.hidden = !view.progress;
    if (!view.progress) {
      this._shown = null;
      return;
    }
    const operation = status.operation?.id ?? status.state;
    if (view.progress.fraction === null) {
      this._bar.removeAttribute('value');
      this._bar.title = view.progress.text;
    } else {
      const before = this._shown?.operation === operation ? this._shown.fraction : 0;
      const fraction = Math.max(before, view.progress.fraction);
      this._shown = { operation, fraction };
      this._bar.value = fraction;
      this._bar.title = `${Math.floor(fraction * 100)}%`;
    }
    this._bar.setAttribute('aria-label', view.progress.text);
  }

  dispose(): void {
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private _button = document.createElement('button');
  private _cancel = document.createElement('button');
  private _dot = document.createElement('span');
  private _label = document.createElement('span');
  private _bar = document.createElement('progress');
  private _shown: { operation: string; fraction: number } | null = null;
}
