/** Issue 27.9: a person's input counts as activity, reported at most once per interval; the
 * lab's own (untrusted, scripted) events never count. The real browser: tests/test_ui_idle.py. */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { IClock, InputReporter } from '../src/activity';

function clock() {
  let now = 1000;
  const timers: { at: number; run: () => void }[] = [];
  const fake: IClock = { now: () => now, later: (run, ms) => void timers.push({ at: now + ms, run }) };
  const advance = (ms: number) => {
    now += ms;
    for (const timer of timers.filter(t => t.at <= now)) {
      timers.splice(timers.indexOf(timer), 1);
      timer.run();
    }
  };
  return { fake, advance, timers };
}

/** A person's event (the test marks it; in a browser `isTrusted` says so). */
function person(type: string): Event {
  const event = new Event(type);
  (event as Event & { person: boolean }).person = true;
  return event;
}

const tick = () => new Promise(resolve => setTimeout(resolve, 0));

test("a person's input is reported at once, then at most once per interval", async () => {
  const target = new EventTarget();
  const { fake, advance } = clock();
  let reports = 0;
  const reporter = new InputReporter(
    target,
    async () => {
      reports++;
      return { report_every: 20 };
    },
    fake,
    event => (event as Event & { person?: boolean }).person === true
  );
  reporter.start();
  target.dispatchEvent(new Event('keydown')); // scripted: never a person
  target.dispatchEvent(new Event('wheel'));
  assert.equal(reports, 0);
  target.dispatchEvent(person('keydown'));
  await tick();
  assert.equal(reports, 1);
  assert.equal(reporter.every, 20_000, 'the server says the interval');
  for (const type of ['pointermove', 'wheel', 'keydown', 'pointerdown']) {
    advance(1000);
    target.dispatchEvent(person(type));
  }
  assert.equal(reports, 1, 'input within the interval waits for its end');
  advance(16_000);
  await tick();
  assert.equal(reports, 2, 'then one report for all of it');
  advance(60_000); // nobody touches the tab: nothing is reported
  await tick();
  assert.equal(reports, 2);
  reporter.dispose();
  target.dispatchEvent(person('keydown'));
  assert.equal(reports, 2);
});

test('input while the first report is on its way waits for the interval the server says', async () => {
  // Seen in Chromium: a click (pointermove, then pointerdown) was reported, the pointerdown
  // waited for the default minute, and the server's 4 s came too late for it: a person using
  // the tab for 20 s was idle to the server.
  const target = new EventTarget();
  const { fake, advance } = clock();
  let reports = 0;
  let answer: (value: { report_every: number }) => void = () => undefined;
  const reporter = new InputReporter(
    target,
    () => {
      reports++;
      return new Promise(resolve => (answer = resolve));
    },
    fake,
    event => (event as Event & { person?: boolean }).person === true
  );
  reporter.start();
  target.dispatchEvent(person('pointermove'));
  target.dispatchEvent(person('pointerdown')); // before the reply: waits
  assert.equal(reports, 1);
  answer({ report_every: 4 });
  await tick();
  advance(4000);
  await tick();
  assert.equal(reports, 2, 'reported at the end of the interval the server said');
  reporter.dispose();
});
