/**
 * The status bar item: the workspace's state, the phase and a progress bar with bytes and rate.
 * It renders whatever the StatusModel last saw, so it survives a page reload; a failed poll is
 * shown as such ("Status unavailable"), never as a stale state.
 */

import { Widget } from '@lumino/widgets';

import { describeStatus } from './describe';
import { StatusModel } from './model';

export class StatusItem extends Widget {
  constructor(
    private readonly model: StatusModel,
    private readonly onActivate: () => void
  ) {
    super({ node: document.createElement('button') });
    this.addClass('jp-gkeresume-status');
    const node = this.node as HTMLButtonElement;
    node.type = 'button';
    node.setAttribute('aria-live', 'polite');
    node.append(this._dot, this._label, this._bar, this._detail);
    this._dot.className = 'jp-gkeresume-dot';
    this._label.className = 'jp-gkeresume-label';
    this._bar.className = 'jp-gkeresume-progress';
    this._bar.max = 1;
    this._detail.className = 'jp-gkeresume-detail';
    node.addEventListener('click', () => this.onActivate());
    model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const status = this.model.status;
    const node = this.node;
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
      node.title = `Pause/resume status: ${why}`;
      node.setAttribute('aria-label', node.title);
      this._bar.hidden = true;
      this._detail.textContent = '';
      return;
    }
    const view = describeStatus(status);
    node.dataset.state = view.state;
    node.dataset.tone = view.tone;
    this._label.textContent = view.label;
    node.title = `${view.title}\n(click: ${view.state === 'paused' ? 'resume' : 'snapshots'})`;
    node.setAttribute('aria-label', view.title);
    this._bar.hidden = !view.progress;
    if (view.progress) {
      if (view.progress.fraction === null) {
        this._bar.removeAttribute('value');
      } else {
        this._bar.value = view.progress.fraction;
      }
      this._bar.setAttribute('aria-label', view.progress.text);
    }
    this._detail.textContent = view.progress?.text ?? '';
  }

  dispose(): void {
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private _dot = document.createElement('span');
  private _label = document.createElement('span');
  private _bar = document.createElement('progress');
  private _detail = document.createElement('span');
}
