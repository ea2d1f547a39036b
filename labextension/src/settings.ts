/**
 * The lab's settings that the server must know: `checkpointOnShutdown` (the settings schema,
 * labextension/schema/plugin.json) goes to `PUT /gkeresume/api/settings` when the settings load
 * and whenever they change. A server without that endpoint (404) is remembered, not an error:
 * `serverKnows` is then false and the dialog says the server's config decides.
 *
 * Call order: `new ServerSettings(put, settings)` (settings from the ISettingRegistry, or null
 * without one), `await ready`, then `checkpointOnShutdown` / `setCheckpointOnShutdown()`.
 */

import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { APIError } from './http';
import { IServerSettings } from './types';

export class ServerSettings {
  constructor(
    private readonly put: (settings: IServerSettings) => Promise<unknown>,
    private readonly settings: ISettingRegistry.ISettings | null
  ) {
    settings?.changed.connect(() => void this.send());
    this.ready = this.send();
  }

  /** Resolves once the server was told the settings (or refused the endpoint). */
  readonly ready: Promise<void>;

  get checkpointOnShutdown(): boolean {
    return (this.settings?.get('checkpointOnShutdown').composite as boolean | undefined) ?? true;
  }

  /** False once the server answered 404 (it has no settings endpoint). */
  get serverKnows(): boolean {
    return this._serverKnows;
  }

  /** Change the setting (saved in the user's settings) and tell the server. */
  async setCheckpointOnShutdown(value: boolean): Promise<void> {
    if (this.settings) {
      await this.settings.set('checkpointOnShutdown', value); // `changed` sends it
    } else {
      await this.send(value);
    }
  }

  private async send(value = this.checkpointOnShutdown): Promise<void> {
    try {
      await this.put({ checkpoint_on_shutdown: value });
      this._serverKnows = true;
    } catch (error) {
      if (error instanceof APIError && error.status === 404) {
        this._serverKnows = false;
        console.warn('jupyter-gkeresume: this server has no settings endpoint; its config decides');
        return;
      }
      console.error('jupyter-gkeresume: could not send the settings to the server', error);
    }
  }

  private _serverKnows = true;
}
