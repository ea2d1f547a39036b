/**
 * The dialogs: the resume dialog (verdict, reasons, choices), the message after a pause or a
 * resume, and the confirmation before deleting a snapshot. Each returns when the user chose.
 */

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { IMessage } from './describe';
import { IResumeOffer, estimateText } from './offer';
import { formatAge, formatBytes, formatUTC } from './format';
import { ISnapshotRow } from './types';

export type ResumeChoice = 'full' | 'compatible' | 'fresh' | 'later';

export interface IResumeAnswer {
  choice: ResumeChoice;
  /** The user ticked "Do not checkpoint on shutdown" (offered after a shutdown pause). */
  stopCheckpointOnShutdown: boolean;
}

/** What the dialog tells about the shutdown checkpoint, and about the setting. */
export const SHUTDOWN_NOTICE =
  'Stopping the server paused this workspace: on shutdown every kernel was checkpointed, and ' +
  'the next start opens on this dialog. Those snapshots stay in the store until deleted.';

/** An element with a class and text. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text = ''
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

function body(className: string, ...children: HTMLElement[]): Widget {
  const widget = new Widget();
  widget.addClass(className);
  widget.node.append(...children);
  return widget;
}

function row(label: string, value: string): HTMLElement {
  const line = el('div', 'jp-gkeresume-row');
  line.append(el('span', 'jp-gkeresume-key', label), el('span', 'jp-gkeresume-value', value));
  return line;
}

/** A verdict badge: "portable", "partial", ... with its level as data for styling. */
export function verdictBadge(level: string | null): HTMLElement {
  const badge = el('span', 'jp-gkeresume-verdict', level ?? 'unknown');
  badge.dataset.level = level ?? 'unknown';
  return badge;
}

const CHOICES: Record<string, ResumeChoice> = {
  Resume: 'full',
  'Resume compatible objects only': 'compatible',
  'Start fresh': 'fresh'
};

/** Ask how to resume a paused workspace. `serverKnowsSettings`: the server takes the
 * checkpoint-on-shutdown setting from the lab (else its own config decides). */
export async function askResume(
  offer: IResumeOffer,
  checkpointOnShutdown: boolean,
  serverKnowsSettings: boolean,
  now = Date.now()
): Promise<IResumeAnswer> {
  const verdict = el('div', 'jp-gkeresume-row');
  verdict.append(el('span', 'jp-gkeresume-key', 'Compatibility'), verdictBadge(offer.level));
  const parts: HTMLElement[] = [];
  const optOut = el('input', 'jp-gkeresume-no-shutdown-checkpoint');
  optOut.type = 'checkbox';
  if (offer.why) {
    parts.push(el('p', 'jp-gkeresume-notice', offer.why));
  }
  if (offer.pausedByShutdown) {
    parts.push(el('p', 'jp-gkeresume-notice', SHUTDOWN_NOTICE));
    if (checkpointOnShutdown) {
      const option = el('label', 'jp-gkeresume-option');
      option.append(optOut, document.createTextNode('Do not checkpoint on shutdown'));
      option.title = serverKnowsSettings
        ? 'Stopping the server will then just stop the kernels (Settings: GPU Pause/Resume)'
        : 'Saved in the settings; this server does not take it from the lab: its config decides';
      parts.push(option);
    }
  }
  parts.push(
    row('Paused', `${formatUTC(offer.pausedAt)} (${formatAge(offer.pausedAt, now)})`),
    row('Notebooks', offer.notebooks.join(', ') || '(none)'),
    row('Size', formatBytes(offer.bytes)),
    ...(offer.saved ? [row('Saved', offer.saved.replace(/^Saved /, ''))] : []),
    row('Estimated restore', estimateText(offer)),
    verdict
  );
  if (offer.packages.length) {
    parts.push(row('Installs', offer.packages.join(', ')));
  }
  if (offer.notComingBack.length) {
    const list = el('ul', 'jp-gkeresume-not-back');
    list.append(...offer.notComingBack.map(line => el('li', '', line)));
    parts.push(el('p', 'jp-gkeresume-key', 'Will not come back:'), list);
  }
  const notes = [
    ...offer.reasons,
    ...Object.entries(offer.objectsAtRisk).map(([name, why]) => `${name} will not load: ${why}`),
    ...offer.problems
  ];
  if (notes.length) {
    const list = el('ul', 'jp-gkeresume-reasons');
    list.append(...notes.map(note => el('li', '', note)));
    parts.push(list);
  }
  if (!offer.canResume) {
    parts.push(
      el(
        'p',
        'jp-gkeresume-warning',
        'This snapshot cannot be restored here. Start fresh: your notebooks and files are kept.'
      )
    );
  }
  const buttons = [
    Dialog.cancelButton({ label: 'Later', caption: 'Keep the workspace paused for now' }),
    Dialog.warnButton({
      label: 'Start fresh',
      caption: 'Discard the pause: notebooks and files stay, the kernels start empty; the snapshots stay listed'
    })
  ];
  if (offer.canResumeCompatible) {
    buttons.push(
      Dialog.okButton({
        label: 'Resume compatible objects only',
        caption: 'Restore every object except those that will not load here'
      })
    );
  }
  if (offer.canResume) {
    buttons.push(
      Dialog.okButton({ label: 'Resume', caption: 'Restore every notebook with its variables' })
    );
  }
  const result = await showDialog({
    title: 'Resume paused workspace',
    body: body('jp-gkeresume-resume-dialog', ...parts),
    buttons,
    hasClose: false
  });
  const choice = result.button.accept ? (CHOICES[result.button.label] ?? 'later') : 'later';
  return { choice, stopCheckpointOnShutdown: optOut.checked };
}

/** A message on screen that can be taken away (a later operation's message replaces it). */
export interface IShownMessage {
  close(): void;
}

/** Show a message (what a pause saved, what a resume restored, why one failed); `close()`
 * takes it off the screen, or out of the queue of dialogs waiting for their turn. */
export function showMessage(message: IMessage, className = 'jp-gkeresume-message'): IShownMessage {
  const lines = message.lines.map(line => el('p', '', line));
  const dialog = new Dialog({
    title: message.title,
    body: body(className, ...lines),
    buttons: [Dialog.okButton({ label: 'OK' })]
  });
  dialog.launch().then(
    () => dialog.dispose(),
    () => undefined // closed before the user did: dispose() rejects the launch
  );
  return { close: () => dialog.dispose() };
}

/** Confirm deleting a snapshot. */
export async function confirmDelete(snapshot: ISnapshotRow): Promise<boolean> {
  const what = snapshot.name ? `${snapshot.name} (${snapshot.id})` : snapshot.id;
  const result = await showDialog({
    title: 'Delete snapshot',
    body: `Delete snapshot ${what}? Its data is reclaimed by garbage collection; this cannot be undone.`,
    buttons: [
      Dialog.cancelButton({ label: 'Cancel' }),
      Dialog.warnButton({ label: 'Delete', caption: `Delete snapshot ${what}` })
    ]
  });
  return result.button.accept;
}
