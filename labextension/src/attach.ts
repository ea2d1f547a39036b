/**
 * After a resume, every open notebook tab is connected to the kernel that holds its restored
 * state. The server keeps one kernel per notebook (jupyter_gkeresume/notebook_sessions.py): a
 * tab that starts its session during or after the resume gets that kernel. A tab whose kernel
 * a pause stopped (the idle pause, `%pause` from another notebook) keeps no session, and its next
 * cell would ask "Select Kernel" and start an empty one: this connects it instead.
 *
 * `tabsToAttach(status, tabs)` is the plan (pure); `TabAttacher.update(status)` applies it,
 * once per tab and kernel, on every status the page reads.
 */

import { IStatus } from './types';

/** An open notebook tab: its path, the kernel it is connected to, how to connect it. */
export interface ITab {
  path: string;
  kernelId: string | null;
  /** Connect the tab to the live kernel `kernelId` (no new kernel starts). */
  attach(kernelId: string): Promise<void>;
}

/**
 * The tabs to connect, with the kernel of each: once no operation runs, a tab whose notebook
 * has a restored kernel (one with a snapshot) and which is connected to no live kernel.
 */
export function tabsToAttach(status: IStatus | null, tabs: ITab[]): [ITab, string][] {
  if (!status || status.operation) {
    return []; // a resume in flight answers the lab's session requests with its kernel
  }
  const live = new Set(status.kernels.map(k => k.kernel_id));
  const restored = new Map<string, string>();
  for (const k of status.kernels) {
    if (k.notebook && k.snapshot_id && (k.state === 'ready' || k.state === 'running')) {
      restored.set(k.notebook, k.kernel_id);
    }
  }
  return tabs
    .filter(tab => restored.has(tab.path) && !(tab.kernelId && live.has(tab.kernelId)))
    .map(tab => [tab, restored.get(tab.path)!]);
}

/** Applies `tabsToAttach`; a failure is reported, and that tab and kernel not tried again. */
export class TabAttacher {
  constructor(
    private readonly tabs: () => ITab[],
    private readonly report: (path: string, error: unknown) => void
  ) {}

  async update(status: IStatus | null): Promise<void> {
    const todo = tabsToAttach(status, this.tabs()).filter(
      ([tab, kid]) => !this._tried.has(`${tab.path}\n${kid}`)
    );
    await Promise.all(
      todo.map(async ([tab, kid]) => {
        this._tried.add(`${tab.path}\n${kid}`);
        try {
          await tab.attach(kid);
        } catch (error) {
          this.report(tab.path, error);
        }
      })
    );
  }

  private readonly _tried = new Set<string>();
}
