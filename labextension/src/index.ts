import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gkeresume:plugin',
  description: 'Pause a GPU notebook and resume it later.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    console.log('jupyter-gkeresume is activated');
  }
};

export default plugin;
