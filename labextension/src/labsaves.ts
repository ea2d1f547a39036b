/**
 * LabSaves: this page's side of the server's save requests (jupyter_gkeresume/lab_saves.py).
 *
 * Every pause, whatever started it (the button, `%pause` in any notebook, the idle pause,
 * `kernel_hooks.pause()`), first asks each connected lab to save its open documents. The page
 * keeps one long poll open (`GET lab/requests?lab=ID&after=N`); when it answers with an open
 * request, the page saves every dirty document (`saveDocuments`) and answers
 * (`POST lab/saved`) with what it saved and what it could not, each with its reason. The server
 * waits a few seconds at most: a page that does not answer never blocks a pause.
 *
 * Free of JupyterLab imports (node's test runner loads it); `documents.ts` adapts the lab's
 * open documents. Call order: `new LabSaves(channel, documents)`, `start()`, `dispose()`.
 */

/** What saving needs of an open document (a DocumentRegistry.Context). */
export interface IOpenDocument {
  readonly path: string;
  readonly dirty: boolean;
  readonly readOnly: boolean;
  save(): Promise<void>;
}

/** A document that could not be saved, and why. */
export interface INotSaved {
  path: string;
  reason: string;
}

/** The answer to one save request (the body of `POST lab/saved`, less `lab` and `request`). */
export interface ISaveAnswer {
  saved: string[];
  not_saved: INotSaved[];
}

/** `GET lab/requests`: the newest request's number; `open` while it waits for answers. */
export interface ISaveRequest {
  request: number;
  open: boolean;
}

/** The two calls of the channel (api.ts in the lab, a fake in the tests). */
export interface ISaveChannel {
  next(lab: string, after: number): Promise<ISaveRequest>;
  answer(lab: string, request: number, answer: ISaveAnswer): Promise<unknown>;
}

/** How long one save may take before it is reported as not saved (below the server's 5 s
 * wait: a save stuck behind a dialog, "File Changed" for one, must not cost the answer). */
export const SAVE_TIMEOUT_MS = 4000;

/** Save every dirty document, all at once; a failure is named and never stops the others. A
 * read-only document with changes cannot be saved: it is named too, and so is a save that has
 * not finished within `timeoutMs`. */
export async function saveDocuments(
  documents: IOpenDocument[],
  timeoutMs = SAVE_TIMEOUT_MS
): Promise<ISaveAnswer> {
  const answer: ISaveAnswer = { saved: [], not_saved: [] };
  const dirty = [...new Map(documents.filter(d => d.dirty).map(d => [d.path, d])).values()];
  await Promise.all(
    dirty.map(async document => {
      if (document.readOnly) {
        answer.not_saved.push({ path: document.path, reason: 'read-only' });
        return;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`not saved within ${timeoutMs / 1000} s (is a dialog open?)`)),
          timeoutMs
        );
      });
      try {
        await Promise.race([document.save(), late]);
        answer.saved.push(document.path);
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        answer.not_saved.push({ path: document.path, reason: reason || 'the save failed' });
      } finally {
        clearTimeout(timer);
      }
    })
  );
  return answer;
}

/** A random id for this page (the server counts the labs by it). */
function pageId(): string {
  const bytes = new Uint8Array(12);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
}

export class LabSaves {
  constructor(
    private readonly channel: ISaveChannel,
    private readonly documents: () => IOpenDocument[],
    readonly retryMs = 5000
  ) {}

  /** This page's id, as the server knows it. */
  readonly lab = pageId();

  /** Keep a poll open until `dispose()`; after a failure, try again every `retryMs`. */
  start(): void {
    if (!this._running) {
      this._running = true;
      void this.loop();
    }
  }

  dispose(): void {
    this._running = false;
  }

  /** Resolves after each answered request (tests wait on it). */
  get answered(): Promise<number> {
    return new Promise(resolve => this._onAnswered.push(resolve));
  }

  private async loop(): Promise<void> {
    let after = 0;
    let failing = false; // said once per streak of failures (a released pod answers none)
    while (this._running) {
      try {
        const { request, open } = await this.channel.next(this.lab, after);
        failing = false;
        after = request;
        if (open && this._running) {
          const answer = await saveDocuments(this.documents());
          await this.channel.answer(this.lab, request, answer);
          this._onAnswered.splice(0).forEach(resolve => resolve(request));
        }
      } catch (error) {
        if (!failing) {
          console.warn('jupyter-gkeresume: save requests unavailable, retrying', error);
        }
        failing = true;
        await new Promise(resolve => setTimeout(resolve, this.retryMs));
      }
    }
  }

  private _running = false;
  private _onAnswered: ((request: number) => void)[] = [];
}

/** What the connected labs saved before a pause (lab_saves.SaveReport: the pause's and the
 * paused record's `documents`). */
export interface IDocumentsReport {
  saved: string[];
  not_saved: INotSaved[];
  /** Labs connected when the pause asked. */
  labs: number;
  /** Of those, the ones that did not answer in time: their unsaved edits are not saved. */
  unanswered: number;
}

/** The lines a pause's message gives its documents: only what was not saved. */
export function documentLines(report: IDocumentsReport | null | undefined): string[] {
  if (!report) {
    return [];
  }
  const lines = report.not_saved.map(n => `Not saved: ${n.path} (${n.reason}).`);
  if (report.unanswered) {
    const which = report.unanswered === 1 ? 'One open lab' : `${report.unanswered} open labs`;
    lines.push(`${which} did not answer in time: edits not saved there are not in the snapshot.`);
  }
  return lines;
}
