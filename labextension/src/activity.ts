/**
 * InputReporter: tells the server that a person is using this lab tab (keys, pointer, wheel),
 * so that reading, moving through the lab by keyboard or scrolling keeps the workspace from
 * its idle pause (jupyter_gkeresume/idle.py, kind `input`). Only events the browser marks as a
 * person's (`isTrusted`) count: the lab's own polls, timers and scripted events never do, so a
 * tab nobody touches still lets the workspace pause.
 *
 * At most one report per `every` milliseconds: the first input is reported at once, later
 * input within the interval once at its end. The server's reply says the interval
 * (`report_every`: a third of its idle timeout, at most a minute). Free of JupyterLab imports
 * (node's test runner loads it). Call order: `new InputReporter(target, report)`, `start()`,
 * `dispose()`.
 */

/** What a person does, as DOM events (not `scroll`: the lab scrolls outputs by itself). */
export const INPUT_EVENTS = ['keydown', 'pointerdown', 'pointermove', 'wheel', 'touchstart'];

/** `POST activity`: resolves with the server's `report_every` in seconds. */
export type ReportInput = () => Promise<{ report_every: number }>;

export interface IClock {
  now(): number;
  later(callback: () => void, ms: number): void;
}

const realClock: IClock = {
  now: () => Date.now(),
  later: (callback, ms) => void setTimeout(callback, ms)
};

export class InputReporter {
  constructor(
    private readonly target: EventTarget,
    private readonly report: ReportInput,
    private readonly clock: IClock = realClock,
    private readonly trusted: (event: Event) => boolean = event => event.isTrusted
  ) {}

  /** Milliseconds between two reports (until the server says, a minute). */
  get every(): number {
    return this._every;
  }

  start(): void {
    for (const type of INPUT_EVENTS) {
      this.target.addEventListener(type, this._onInput, { capture: true, passive: true });
    }
  }

  dispose(): void {
    this._disposed = true;
    for (const type of INPUT_EVENTS) {
      this.target.removeEventListener(type, this._onInput, { capture: true });
    }
  }

  private readonly _onInput = (event: Event): void => {
    if (this._disposed || !this.trusted(event) || this._pending) {
      return;
    }
    if (this._sent + this._every <= this.clock.now()) {
      this.send();
      return;
    }
    this._pending = true;
    this.schedule();
  };

  /** The pending input's report at the end of the interval; a later call (the server said
   * another interval) replaces an earlier one. */
  private schedule(): void {
    const turn = ++this._turn;
    const wait = Math.max(0, this._sent + this._every - this.clock.now());
    this.clock.later(() => {
      if (turn === this._turn && !this._disposed) {
        this._pending = false;
        this.send();
      }
    }, wait);
  }

  private send(): void {
    this._sent = this.clock.now();
    this.report().then(
      reply => {
        const every = reply.report_every * 1000;
        if (every > 0 && every !== this._every) {
          this._every = every;
          if (this._pending) {
            this.schedule(); // input waiting for the old interval waits for this one
          }
        }
      },
      error => console.warn('jupyter-gkeresume: input not reported', error)
    );
  }

  private _every = 60_000;
  private _sent = -Infinity;
  private _pending = false;
  private _turn = 0;
  private _disposed = false;
}
