/** Issue 27 items 6 and 7: what the user reads after a pause, an idle pause and before a resume. */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { pauseSummary } from '../src/describe';
import { formatDuration } from '../src/format';
import { estimateText, resumeOffer } from '../src/offer';
import { IPausedRecord, ISnapshotRow } from '../src/types';
import { checkpoint, status } from './fixtures';

const MIB = 1024 ** 2;

/** What issue 27 saw: modules and IPython names first, `opt` and `df` behind "…", and `proc`
 * saved and "Not saved: proc (inside)" with its thread named twice. */
const RESULT = checkpoint({
  bytes_total: 677 * MIB,
  bytes_new: 677 * MIB,
  saved: ['torch', 'nn', 'np', 'arr', 'digest', 'opt_digest', '_exit_code', 'pd', 'model', 'proc',
    'a1', 'a2', 'a3', 'a4', 'a5', 'opt', 'df'],
  modules: ['torch', 'nn', 'np', 'pd'],
  skipped: [
    { name: 'gen', type: 'generator', reason: 'a generator or coroutine holds a running frame' },
    { name: 'proc', type: 'thread', reason: 'worker: a thread started in the session does not come back', inside: true },
    { name: 'proc', type: 'child process', reason: 'sleep 300 (process 812): it keeps running on this pod only', inside: true }
  ]
});

function record(over: Partial<IPausedRecord> = {}): IPausedRecord {
  return {
    version: 1,
    workspace: 'hub-alice',
    paused_at: '2026-11-30T10:15:00Z',
    reason: 'user',
    release_backend: 'none',
    gpus: 0,
    kernels: [{
      kernel_id: 'k1',
      kernel_name: 'python3',
      notebook: 'train.ipynb',
      snapshot_id: 's1',
      bytes_total: RESULT.bytes_total,
      bytes_new: RESULT.bytes_new,
      saved: RESULT.saved,
      skipped: RESULT.skipped,
      modules: RESULT.modules
    }],
    ...over
  };
}

test("the pause message lists the user's data, every name once, modules apart", () => {
  const message = pauseSummary(status('paused', { paused: record(), kernels: [] }), []);
  const text = message.lines.join('\n');
  assert.equal(
    message.lines[0],
    'Saved 12 objects (677 MiB, 677 MiB new) from 1 kernel: arr, digest, opt_digest, model, a1, ' +
      'a2, a3, a4, a5, opt, df, proc'
  );
  assert.ok(message.lines.includes('Modules, imported again on resume: torch, nn, np, pd.'), text);
  assert.ok(!text.includes('_exit_code'), text);
  assert.ok(!text.includes('(inside)'), text);
  assert.equal(text.match(/worker/g)?.length, 1, text);
  assert.equal(text.match(/sleep 300/g)?.length, 1, text);
  assert.ok(
    message.lines.includes(
      'proc comes back without its thread (worker: a thread started in the session does not ' +
        'come back) and its child process (sleep 300 (process 812): it keeps running on this pod only).'
    ),
    text
  );
  assert.ok(message.lines.includes('Not saved: gen (generator): a generator or coroutine holds a running frame'));
  assert.equal(text.match(/\bproc\b/g)?.length, 2, 'listed as saved, and once for what it lacks');
});

test('the resume dialog says, before Resume, what will not come back', () => {
  const rows: ISnapshotRow[] = [{
    id: 's1', name: null, created: '2026-11-30T10:15:00Z', notebook: 'train.ipynb',
    bytes: RESULT.bytes_total, objects: 18, skipped: 1,
    verdict: { level: 'exact', reasons: [], objects_at_risk: {} }, error: null
  }];
  const offer = resumeOffer(status('paused', { paused: record() }), rows)!;
  assert.deepEqual(offer.notComingBack, [
    'Not saved: gen (generator): a generator or coroutine holds a running frame',
    'proc comes back without its thread (worker: a thread started in the session does not come ' +
      'back) and its child process (sleep 300 (process 812): it keeps running on this pod only).'
  ]);
  // a record from an older server names no skipped objects: the snapshot row still counts them
  const older = record();
  delete older.kernels[0].skipped;
  const counted = resumeOffer(status('paused', { paused: older }), rows)!;
  assert.deepEqual(counted.notComingBack, ['train.ipynb: 1 object was not saved.']);
});

test('no "about < 1 s": short times read as words', () => {
  assert.equal(formatDuration(0.4), 'under a second');
  const offer = resumeOffer(status('paused', { paused: record(), resume_estimate_seconds: 0.3 }), [])!;
  assert.equal(estimateText(offer), 'under a second for 677 MiB (measured on this store)');
});

// --- item 6: why and when an idle pause happened; no message of an earlier operation after a later one

import { StatusModel } from '../src/model';
import { INotificationSink, OperationNotifier } from '../src/notifier';
import { IStatus } from '../src/types';
import { operation } from './fixtures';

const IDLE = { since: '2026-11-30T10:14:05Z', seconds: 61.2, timeout: 60 };

test('after an idle pause the message says nobody was active, since when, after how long', () => {
  const paused = status('paused', { paused: record({ reason: 'idle', idle: IDLE }), kernels: [] });
  const message = pauseSummary(paused, []);
  assert.equal(message.title, 'Workspace paused: nobody was active');
  assert.equal(
    message.lines[0],
    'Paused at 2026-11-30 10:15 UTC because nobody was active since 2026-11-30 10:14 UTC ' +
      '(1 min 1 s; the idle pause comes after 1 min).'
  );
  assert.match(message.lines[1], /^Saved 12 objects/);
  const offer = resumeOffer(paused, [])!;
  assert.equal(offer.why, message.lines[0]);
  assert.match(offer.saved!, /^Saved 12 objects \(677 MiB, 677 MiB new\) from 1 kernel: arr, /);
  const asked = resumeOffer(status('paused', { paused: record() }), [])!;
  assert.equal(asked.why, null);
});

/** A sink whose dismissals leave the screen when the test says so, in any order. */
function sink() {
  const leaving = new Map<string, () => void>();
  let next = 0;
  const fake: INotificationSink = {
    emit: () => `n${++next}`,
    update: () => true,
    dismiss: id => new Promise<void>(resolve => leaving.set(id, resolve))
  };
  const leave = (id: string) => {
    leaving.get(id)!();
    leaving.delete(id);
  };
  return { fake, leave };
}

const tick = () => new Promise(resolve => setTimeout(resolve, 0));

test('no message of an earlier operation after a later one, and a later one closes it', async () => {
  const resume = operation({ id: 'op-resume', kind: 'resume', mode: 'full' });
  const pause = operation({ id: 'op-idle', kind: 'pause', reason: 'idle' });
  const replies: IStatus[] = [
    status('restoring', { operation: resume }),
    status('ready'),
    status('pausing', { operation: pause, reason: 'idle' }),
    status('paused', { paused: record({ reason: 'idle', idle: IDLE }), kernels: [] })
  ];
  const model = new StatusModel(async () => replies.shift()!);
  const { fake, leave } = sink();
  const shown: { id: string; open: boolean }[] = [];
  const notifier = new OperationNotifier(model, fake, () => undefined, finished => {
    const message = { id: finished.operation.id, open: true };
    shown.push(message);
    return { close: () => (message.open = false) };
  });
  await model.refresh(); // the resume in flight: n1
  await model.refresh(); // it ended: n1 dismissed, still leaving the screen
  await model.refresh(); // the idle pause in flight: n2
  await model.refresh(); // it ended: n2 dismissed
  leave('n2'); // the later toast leaves first ...
  await tick();
  leave('n1'); // ... the earlier one after it
  await tick();
  assert.deepEqual(shown, [{ id: 'op-idle', open: true }], 'the resume message never came');

  // A message on screen is closed as soon as a later operation is seen.
  const again: IStatus[] = [
    status('restoring', { operation: resume }),
    status('ready'),
    status('pausing', { operation: pause, reason: 'idle' })
  ];
  const second = new StatusModel(async () => again.shift()!);
  const other = sink();
  const told: { id: string; open: boolean }[] = [];
  const watching = new OperationNotifier(second, other.fake, () => undefined, finished => {
    const message = { id: finished.operation.id, open: true };
    told.push(message);
    return { close: () => (message.open = false) };
  });
  await second.refresh();
  await second.refresh();
  other.leave('n1');
  await tick();
  assert.deepEqual(told, [{ id: 'op-resume', open: true }]);
  await second.refresh(); // the idle pause begins: "Workspace resumed" must not stay over it
  assert.deepEqual(told, [{ id: 'op-resume', open: false }]);
  notifier.dispose();
  watching.dispose();
  model.dispose();
  second.dispose();
});

test('a pause this page did not see in flight is still told when its record appears', async () => {
  const replies: IStatus[] = [
    status('ready'),
    status('paused', { paused: record({ reason: 'idle', idle: IDLE }), kernels: [] }),
    status('paused', { paused: record({ reason: 'idle', idle: IDLE }), kernels: [] })
  ];
  const model = new StatusModel(async () => replies.shift()!);
  const finished: string[] = [];
  model.finished.connect((_, f) => finished.push(`${f.operation.kind} ${f.operation.reason}`));
  await model.refresh();
  await model.refresh();
  await model.refresh(); // the same record again: told once
  assert.deepEqual(finished, ['pause idle']);
  // a page opened on a paused workspace has the resume dialog, not this message
  const opened = new StatusModel(async () => status('paused', { paused: record() }));
  let told = 0;
  opened.finished.connect(() => told++);
  await opened.refresh();
  assert.equal(told, 0);
  model.dispose();
  opened.dispose();
});

import { resumeSummary } from '../src/describe';
import { kernel } from './fixtures';

test("the resume message names the user's data too, the modules apart", () => {
  const op = operation({ kind: 'resume', mode: 'full', kernels: ['k1'] });
  const result = {
    snapshot_id: 's1', restored: ['np', 'x', '_exit_code', 'big'], not_restored: [], warnings: [],
    verdict: {}, bytes_read: 0, seconds: 1, modules: ['np']
  };
  const message = resumeSummary(status('ready', { kernels: [kernel({ state: 'ready', result })] }), op);
  assert.deepEqual(message.lines.slice(0, 2), [
    'Restored 2 objects into 1 kernel: x, big',
    'Modules, imported again: np.'
  ]);
});
