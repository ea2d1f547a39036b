/**
 * The documents open in this page's main area, as `labsaves.IOpenDocument`s (one per
 * document, however many views show it).
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { DocumentRegistry } from '@jupyterlab/docregistry';

import { IOpenDocument } from './labsaves';

export function openDocuments(
  app: JupyterFrontEnd,
  docManager: IDocumentManager
): IOpenDocument[] {
  const contexts = new Set<DocumentRegistry.Context>();
  for (const widget of app.shell.widgets('main')) {
    const context = docManager.contextForWidget(widget);
    if (context) {
      contexts.add(context);
    }
  }
  return [...contexts].map(context => ({
    path: context.path,
    dirty: context.model.dirty,
    readOnly: context.model.readOnly,
    save: () => context.save()
  }));
}
