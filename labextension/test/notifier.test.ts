import assert from 'node:assert/strict';
import { test } from 'node:test';

import { StatusModel } from '../src/model';
import { INotificationSink, OperationNotifier } from '../src/notifier';
import { IStatus } from '../src/types';
import { kernel, operation, status } from './fixtures';

/** A notification sink that keeps what is open, as JupyterLab's manager would; a dismissed
 * notification leaves the screen when `leave()` is called (the toast's exit, in the page). */
function sink() {
  const open = new Map<string, string>();
  const log: string[] = [];
  const leaving: (() => void)[] = [];
  const leave = () => leaving.splice(0).forEach(left => left());
  let next = 0;
  const fake: INotificationSink = {
    emit(message) {
      const id = `n${++next}`;
      open.set(id, message);
      log.push(`emit ${id}`);
      return id;
    },
    update({ id, message }) {
      log.push(`update ${id}`);
      if (!open.has(id)) {
        return false;
      }
      open.set(id, message);
      return true;
    },
    dismiss(id) {
      log.push(`dismiss ${id}`);
      open.delete(id);
      return new Promise<void>(resolve =>
        leaving.push(() => {
          log.push(`left ${id}`);
          resolve();
        })
      );
    }
  };
  return { fake, open, log, leave };
}

function scripted(replies: IStatus[]): StatusModel {
  return new StatusModel(async () => replies.shift()!);
}

const progress = (done: number) => ({
  phase: 'writing' as const,
  done_bytes: done,
  total_bytes: 100,
  rate: 10,
  seconds: 1
});

test('one notification per operation, updated in place, closed when it ends', async () => {
  const op = operation({ cancellable: true });
  const model = scripted([
    status('running'),
    status('pausing', { operation: op, kernels: [kernel({ state: 'pausing', progress: progress(10) })] }),
    status('pausing', { operation: op, kernels: [kernel({ state: 'pausing', progress: progress(60) })] }),
    status('pausing', { operation: op, kernels: [kernel({ state: 'pausing', progress: progress(60) })] }),
    status('paused', { kernels: [] })
  ]);
  const { fake, open, log } = sink();
  let cancelled = 0;
  const notifier = new OperationNotifier(model, fake, () => cancelled++, () => undefined);
  await model.refresh();
  assert.equal(open.size, 0);
  await model.refresh();
  assert.equal(open.size, 1);
  assert.match([...open.values()][0], /^Pausing: writing 10 B of 100 B/);
  await model.refresh();
  await model.refresh(); // the same words again: no update
  assert.match([...open.values()][0], /^Pausing: writing 60 B of 100 B/);
  assert.deepEqual(log, ['emit n1', 'update n1']);
  await model.refresh();
  assert.equal(open.size, 0, 'closed with its operation');
  assert.equal(notifier.openId, null);
  assert.equal(cancelled, 0);
  notifier.dispose();
  model.dispose();
});

test('a new operation replaces the old notification; a failed poll keeps it', async () => {
  const first = operation({ id: 'op-a' });
  const second = operation({ id: 'op-b', kind: 'resume' });
  const replies: (IStatus | Error)[] = [
    status('pausing', { operation: first }),
    new Error('GET status: unreachable'),
    status('waiting_for_resources', { operation: second })
  ];
  const model = new StatusModel(async () => {
    const next = replies.shift()!;
    if (next instanceof Error) {
      throw next;
    }
    return next;
  });
  const { fake, open } = sink();
  const notifier = new OperationNotifier(model, fake, () => undefined, () => undefined);
  await model.refresh();
  const id = notifier.openId;
  await model.refresh();
  assert.equal(notifier.openId, id);
  await model.refresh();
  assert.equal(open.size, 1);
  assert.notEqual(notifier.openId, id);
  assert.match([...open.values()][0], /^Resuming: starting the kernels/);
  notifier.dispose();
  assert.equal(open.size, 0);
  model.dispose();
});

test('the message is shown only once the notification has left the screen', async () => {
  const op = operation({ release: false });
  const model = scripted([
    status('pausing', { operation: op, kernels: [kernel({ state: 'pausing', progress: progress(10) })] }),
    status('running')
  ]);
  const { fake, log, leave } = sink();
  const told: string[] = [];
  const notifier = new OperationNotifier(model, fake, () => undefined, finished => {
    log.push(`tell ${finished.operation.id}`);
    told.push(finished.operation.id);
  });
  await model.refresh();
  await model.refresh(); // the operation is over
  await new Promise(resolve => setTimeout(resolve, 0));
  assert.deepEqual(told, [], 'no message while the notification is still on screen');
  leave();
  await new Promise(resolve => setTimeout(resolve, 0));
  assert.deepEqual(log, ['emit n1', 'dismiss n1', 'left n1', 'tell op-1']);
  notifier.dispose();
  model.dispose();
});
