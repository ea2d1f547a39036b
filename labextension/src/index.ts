/**
 * jupyter-gkeresume lab extension: a Pause button in every notebook toolbar, four commands
 * (palette and a "GPU" main menu), a status bar item, a Snapshots side panel, and the resume
 * dialog when JupyterLab opens on a paused workspace.
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, showErrorMessage } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IMainMenu } from '@jupyterlab/mainmenu';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { CommandToolbarButton, LabIcon } from '@jupyterlab/ui-components';
import { Menu } from '@lumino/widgets';

import { InputReporter } from './activity';
import { api, saveChannel } from './api';
import { ITab, TabAttacher } from './attach';
import { PausedBadge } from './badge';
import { Controller } from './controller';
import { openDocuments } from './documents';
import { LabSaves } from './labsaves';
import { StatusModel } from './model';
import { SnapshotsPanel } from './panel';
import { ServerSettings } from './settings';
import { StatusItem } from './statusbar';

export const pauseIcon = new LabIcon({
  name: 'gkeresume:pause',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<g class="jp-icon3" fill="#616161"><rect x="3" y="2" width="3.5" height="12" rx="1"/>' +
    '<rect x="9.5" y="2" width="3.5" height="12" rx="1"/></g></svg>'
});

export const snapshotsIcon = new LabIcon({
  name: 'gkeresume:snapshots',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<g class="jp-icon3" fill="#616161"><rect x="2" y="2" width="12" height="3" rx="1"/>' +
    '<rect x="2" y="6.5" width="12" height="3" rx="1"/>' +
    '<rect x="2" y="11" width="12" height="3" rx="1"/></g></svg>'
});

export const CommandIDs = {
  pause: 'gkeresume:pause',
  checkpoint: 'gkeresume:checkpoint',
  resume: 'gkeresume:resume',
  snapshots: 'gkeresume:snapshots'
};

const PLUGIN_ID = 'jupyter-gkeresume:plugin';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Pause a GPU notebook, release the GPU, and resume it later.',
  autoStart: true,
  requires: [IDocumentManager],
  optional: [
    INotebookTracker,
    ICommandPalette,
    IMainMenu,
    IStatusBar,
    ILayoutRestorer,
    ISettingRegistry
  ],
  activate: async (
    app: JupyterFrontEnd,
    docManager: IDocumentManager,
    notebooks: INotebookTracker | null,
    palette: ICommandPalette | null,
    mainMenu: IMainMenu | null,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null,
    registry: ISettingRegistry | null
  ) => {
    const model = new StatusModel(api.status);
    const loaded = await registry?.load(PLUGIN_ID).catch(error => {
      console.error('jupyter-gkeresume: settings not loaded', error);
      return null;
    });
    const settings = new ServerSettings(api.putSettings, loaded ?? null);
    const controller = new Controller(app, docManager, notebooks, model, settings);
    // every pause, whoever starts it, has this page save its documents first
    new LabSaves(saveChannel, () => openDocuments(app, docManager)).start();
    // a person using this tab is not idle (the idle pause); the lab's polls are not a person
    new InputReporter(document, api.activity).start();
    // after a resume, every open notebook is connected to the kernel holding its state
    const attacher = new TabAttacher(
      () => notebookTabs(app, notebooks),
      (path, error) => console.error(`jupyter-gkeresume: ${path} not reconnected`, error)
    );
    model.changed.connect((_, status) => void attacher.update(status));
    const { commands, shell } = app;

    const panel = new SnapshotsPanel(model, {
      list: api.snapshots,
      restore: snapshot => controller.restore(snapshot),
      remove: snapshot => api.deleteSnapshot(snapshot.id),
      report: (title, error) => void showErrorMessage(title, error as Error)
    });
    panel.title.icon = snapshotsIcon;
    shell.add(panel, 'left', { rank: 900 });
    restorer?.add(panel, panel.id);

    commands.addCommand(CommandIDs.pause, {
      label: args => (args.toolbar ? 'Pause' : 'Pause Workspace'),
      caption: 'Save every open document, snapshot every kernel, then release the GPU',
      icon: args => (args.toolbar ? pauseIcon : undefined),
      isEnabled: () => !model.busy && model.status?.state !== 'paused',
      execute: () => controller.run('Pause failed', () => controller.pause())
    });
    commands.addCommand(CommandIDs.checkpoint, {
      label: 'Checkpoint This Notebook',
      caption: "Snapshot the current notebook's kernel; it keeps running",
      isEnabled: () => !model.busy && !!notebooks?.currentWidget,
      execute: () => controller.run('Checkpoint failed', () => controller.checkpoint())
    });
    commands.addCommand(CommandIDs.resume, {
      label: 'Resume…',
      caption: 'Resume the paused workspace, or restore a snapshot',
      isEnabled: () => !model.busy,
      execute: () => controller.run('Resume failed', () => controller.offerResume())
    });
    commands.addCommand(CommandIDs.snapshots, {
      label: 'Show Snapshots',
      caption: 'Open the Snapshots panel',
      execute: () => shell.activateById(panel.id)
    });
    model.changed.connect(() => commands.notifyCommandChanged());

    const category = 'GPU Pause/Resume';
    for (const command of Object.values(CommandIDs)) {
      palette?.addItem({ command, category });
    }
    if (mainMenu) {
      const menu = new Menu({ commands });
      menu.title.label = 'GPU';
      menu.id = 'jp-gkeresume-menu';
      for (const command of Object.values(CommandIDs)) {
        menu.addItem({ command });
      }
      mainMenu.addMenu(menu, true, { rank: 1000 });
    }

    app.docRegistry.addWidgetExtension('Notebook', {
      createNew: (notebook: NotebookPanel) => {
        const button = new CommandToolbarButton({
          commands,
          id: CommandIDs.pause,
          args: { toolbar: true },
          label: 'Pause'
        });
        button.addClass('jp-gkeresume-pause-button');
        if (!notebook.toolbar.insertAfter('cellType', 'gkeresume-pause', button)) {
          notebook.toolbar.addItem('gkeresume-pause', button);
        }
        const badge = new PausedBadge(model, () => notebook.context.path);
        notebook.toolbar.insertAfter('gkeresume-pause', 'gkeresume-badge', badge);
        button.disposed.connect(() => badge.dispose());
        return button;
      }
    });

    if (statusBar) {
      const item = new StatusItem(
        model,
        () =>
          void commands.execute(model.status?.paused ? CommandIDs.resume : CommandIDs.snapshots),
        () => void controller.run('Cancel failed', () => controller.cancel())
      );
      statusBar.registerStatusItem('jupyter-gkeresume:status', {
        item,
        align: 'left',
        rank: 5
      });
    }

    void app.restored.then(() =>
      controller.run('Resume failed', () => controller.start())
    );
  }
};

/** The open notebook tabs, one per notebook (`attach.ITab`). */
function notebookTabs(app: JupyterFrontEnd, notebooks: INotebookTracker | null): ITab[] {
  const tabs = new Map<string, ITab>();
  notebooks?.forEach(panel => {
    const { sessionContext } = panel;
    if (!sessionContext.isReady) {
      return; // its own first session is on the way (the server answers it with the kernel)
    }
    tabs.set(panel.context.path, {
      path: panel.context.path,
      kernelId: sessionContext.session?.kernel?.id ?? null,
      attach: async (id: string) => {
        // a session whose kernel the pause stopped is dropped first (the lab would notice on
        // its next poll); a tab left without one gets a new session on the live kernel (a
        // session the server still lists has a live kernel: the user's, left as it is)
        await app.serviceManager.sessions.refreshRunning();
        if (!sessionContext.session) {
          await sessionContext.changeKernel({ id });
        }
      }
    });
  });
  return [...tabs.values()];
}

export default plugin;
