/**
 * Calls to the server extension's REST API (docs/api.md), through JupyterLab's ServerConnection
 * (base URL, token, XSRF). Every failure is an `APIError` carrying the server's message.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { requestJSON } from './http';
import { ISaveAnswer, ISaveChannel, ISaveRequest } from './labsaves';
import {
  IPauseReply,
  IPauseRequest,
  IResumeReply,
  IResumeRequest,
  ISnapshotRow,
  IServerSettings,
  ISnapshotsReply,
  IStatus
} from './types';

export const API_PATH = 'gkeresume/api';

/** Call `endPoint` under /gkeresume/api and return its JSON reply. */
export function requestAPI<T>(
  endPoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_PATH, endPoint);
  const what = `${init.method ?? 'GET'} ${endPoint}`;
  return requestJSON<T>(() => ServerConnection.makeRequest(url, init, settings), what);
}

function post<T>(endPoint: string, body: object): Promise<T> {
  return requestAPI<T>(endPoint, { method: 'POST', body: JSON.stringify(body) });
}

/** The server's save requests (labsaves.ts): a long poll and the answer. */
export const saveChannel: ISaveChannel = {
  next: (lab: string, after: number): Promise<ISaveRequest> =>
    requestAPI<ISaveRequest>(
      `lab/requests?${new URLSearchParams({ lab, after: String(after) })}`
    ),
  answer: (lab: string, request: number, answer: ISaveAnswer): Promise<unknown> =>
    post('lab/saved', { lab, request, ...answer })
};

export const api = {
  status: (): Promise<IStatus> => requestAPI<IStatus>('status'),
  pause: (request: IPauseRequest = {}): Promise<IPauseReply> => post('pause', request),
  resume: (request: IResumeRequest = {}): Promise<IResumeReply> => post('resume', request),
  snapshots: async (): Promise<ISnapshotRow[]> =>
    (await requestAPI<ISnapshotsReply>('snapshots')).snapshots,
  deleteSnapshot: (id: string): Promise<void> =>
    requestAPI<void>(`snapshots/${encodeURIComponent(id)}`, { method: 'DELETE' }),
  /** Cancel the pause in flight: 202, or an APIError 409 once it is too late (releasing). */
  cancel: (): Promise<unknown> => post('cancel', {}),
  /** Discard the paused record (start fresh; the snapshots stay). */
  discardPaused: (): Promise<void> => requestAPI<void>('paused', { method: 'DELETE' }),
  /** A person's input in this tab (activity.ts): the server says how often to report it. */
  activity: (): Promise<{ report_every: number }> => post('activity', {}),
  /** Tell the server the lab's settings; an APIError 404 from a server without the endpoint. */
  putSettings: (settings: IServerSettings): Promise<unknown> =>
    requestAPI('settings', { method: 'PUT', body: JSON.stringify(settings) })
};
