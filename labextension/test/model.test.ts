import assert from 'node:assert/strict';
import { test } from 'node:test';

import { IFinished, StatusModel } from '../src/model';
import { IStatus } from '../src/types';
import { checkpoint, kernel, operation, status } from './fixtures';

/** A StatusModel over a scripted series of statuses (never started: no timers). */
function scripted(...replies: (IStatus | Error)[]) {
  const model = new StatusModel(async () => {
    const next = replies.shift();
    if (!next) {
      throw new Error('script exhausted');
    }
    if (next instanceof Error) {
      throw next;
    }
    return next;
  });
  const finished: IFinished[] = [];
  model.finished.connect((_, done) => finished.push(done));
  return { model, finished };
}

test('a pause seen in flight is reported once when over, with its own results', async () => {
  const op = operation();
  const old = checkpoint({ snapshot_id: 'old', saved: ['stale'] });
  const fresh = checkpoint({ snapshot_id: 'new' });
  const { model, finished } = scripted(
    status('running', { kernels: [kernel({ result: old })] }),
    status('pausing', { operation: op, kernels: [kernel({ state: 'pausing', result: old })] }),
    status('releasing', { operation: op, kernels: [kernel({ state: 'releasing', result: fresh })] }),
    status('paused', { kernels: [] }),
    status('paused', { kernels: [] })
  );
  await model.refresh();
  await model.refresh();
  assert.equal(model.busy, true);
  await model.refresh();
  assert.equal(finished.length, 0);
  await model.refresh();
  await model.refresh();
  assert.equal(finished.length, 1);
  assert.equal(finished[0].operation.id, op.id);
  assert.deepEqual(finished[0].results.map(r => r.snapshot_id), ['new']);
  assert.equal(finished[0].status.state, 'paused');
  assert.equal(model.busy, false);
  model.dispose();
});

test('an operation this page started is reported even if it ends before the next poll', async () => {
  const op = operation({ id: 'op-fast' });
  const { model, finished } = scripted(status('running'), status('paused', { kernels: [] }));
  await model.refresh();
  await model.follow(op);
  assert.equal(finished.length, 1);
  assert.equal(finished[0].operation.id, 'op-fast');
  model.dispose();
});

test('a poll answered after follow() but sent before it is dropped', async () => {
  let release: (s: IStatus) => void = () => undefined;
  const replies: Promise<IStatus>[] = [
    new Promise<IStatus>(resolve => (release = resolve)),
    Promise.resolve(status('pausing', { operation: operation({ id: 'op-2' }) }))
  ];
  const model = new StatusModel(() => replies.shift()!);
  const finished: IFinished[] = [];
  model.finished.connect((_, done) => finished.push(done));
  const early = model.refresh();
  await model.follow(operation({ id: 'op-2' }));
  release(status('running'));
  await early;
  assert.equal(finished.length, 0, 'the stale "running" answer must not end op-2');
  assert.equal(model.status?.state, 'pausing');
  model.dispose();
});

test('a failed poll is kept as the error, and cleared by the next good one', async () => {
  const { model } = scripted(new Error('GET status: 500 Internal Server Error'), status('ready'));
  const seen: (IStatus | null)[] = [];
  model.changed.connect((_, s) => seen.push(s));
  assert.equal(await model.refresh(), null);
  assert.equal(model.error?.message, 'GET status: 500 Internal Server Error');
  assert.equal((await model.refresh())?.state, 'ready');
  assert.equal(model.error, null);
  assert.deepEqual(seen.map(s => s?.state ?? null), [null, 'ready']);
  model.dispose();
});

test('the finished operation carries its latest details (kernels started on the way)', async () => {
  const started = operation({ id: 'op-r', kind: 'resume', mode: 'full', kernels: [] });
  const { model, finished } = scripted(
    status('waiting_for_resources', { operation: { ...started, kernels: ['k9'] } }),
    status('ready')
  );
  await model.follow(started);
  await model.refresh();
  assert.deepEqual(finished[0].operation.kernels, ['k9']);
  model.dispose();
});

test('once started, the Poll asks again by itself, fast while an operation is in flight', async () => {
  const op = operation({ id: 'op-p' });
  const replies = [
    status('pausing', { operation: op }),
    status('pausing', { operation: op }),
    status('paused', { kernels: [] })
  ];
  let asked = 0;
  const model = new StatusModel(async () => {
    asked++;
    return replies.shift() ?? status('paused', { kernels: [] });
  }, 5, 60_000);
  const finished: IFinished[] = [];
  model.finished.connect((_, done) => finished.push(done));
  const timers = () => process.getActiveResourcesInfo().filter(r => r === 'Timeout').length;
  const before = timers();
  await model.start();
  // No timer is awaited with a time: the Poll's own ticks bring the end of the operation.
  while (!finished.length) {
    await new Promise(resolve => setImmediate(resolve));
  }
  assert.equal(finished[0].operation.id, 'op-p');
  assert.ok(asked >= 3);
  model.dispose();
  assert.equal(timers(), before, 'a disposed model leaves no timer behind (the next slow poll)');
});
