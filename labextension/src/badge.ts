/**
 * The "Paused" badge in a notebook's toolbar: JupyterLab's kernel indicator says "Idle" or "No
 * Kernel" while a pause holds the notebook's state, so this says what is true (`notebookBadge`).
 * It re-renders on every status the model sees; hidden when there is nothing to say.
 */

import { Widget } from '@lumino/widgets';

import { notebookBadge } from './describe';
import { StatusModel } from './model';

export class PausedBadge extends Widget {
  constructor(
    private readonly model: StatusModel,
    private readonly path: () => string
  ) {
    super({ node: document.createElement('span') });
    this.addClass('jp-gkeresume-badge');
    this.node.setAttribute('role', 'status');
    model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const badge = notebookBadge(this.model.status, this.path());
    this.node.hidden = !badge;
    this.node.textContent = badge?.title ?? '';
    this.node.title = badge?.lines.join(' ') ?? '';
    this.node.dataset.badge = badge?.title ?? '';
  }

  dispose(): void {
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }
}
