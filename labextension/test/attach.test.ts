import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ITab, TabAttacher, tabsToAttach } from '../src/attach';
import { kernel, operation, status } from './fixtures';

function tab(path: string, kernelId: string | null, fail?: string): ITab & { attached: string[] } {
  const t = {
    path,
    kernelId,
    attached: [] as string[],
    attach: async (kid: string) => {
      if (fail) {
        throw new Error(fail);
      }
      t.attached.push(kid);
      t.kernelId = kid;
    }
  };
  return t;
}

const restored = (over = {}) =>
  status('ready', {
    kernels: [
      kernel({ kernel_id: 'ka', notebook: 'a.ipynb', state: 'ready', snapshot_id: 's-a' }),
      kernel({ kernel_id: 'kb', notebook: 'b.ipynb', state: 'running', snapshot_id: 's-b' }),
      kernel({ kernel_id: 'kc', notebook: 'c.ipynb', state: 'running' })
    ],
    ...over
  });

test('a tab without a live kernel is connected to its notebook’s restored kernel', () => {
  const a = tab('a.ipynb', null); // its session went with the pause
  const b = tab('b.ipynb', 'gone'); // the lab has not noticed the kernel went
  const c = tab('c.ipynb', null); // never restored: the user's choice stays
  const d = tab('a.ipynb', 'ka'); // already connected
  const plan = tabsToAttach(restored(), [a, b, c, d]);
  assert.deepEqual(
    plan.map(([t, kid]) => [t.path, t.kernelId, kid]),
    [
      ['a.ipynb', null, 'ka'],
      ['b.ipynb', 'gone', 'kb']
    ]
  );
});

test('nothing is attached while an operation runs or without a status', () => {
  const a = tab('a.ipynb', null);
  assert.deepEqual(tabsToAttach(restored({ operation: operation({ kind: 'resume' }) }), [a]), []);
  assert.deepEqual(tabsToAttach(null, [a]), []);
  assert.deepEqual(tabsToAttach(status('paused', { kernels: [] }), [a]), []);
});

test('TabAttacher connects each tab once per kernel and reports a failure once', async () => {
  const a = tab('a.ipynb', null);
  const broken = tab('b.ipynb', null, 'session gone');
  const reports: string[] = [];
  const attacher = new TabAttacher(
    () => [a, broken],
    (path, error) => reports.push(`${path}: ${(error as Error).message}`)
  );
  await attacher.update(restored());
  await attacher.update(restored());
  a.kernelId = null; // the user shut it down again: not reattached to the same kernel
  await attacher.update(restored());
  assert.deepEqual(a.attached, ['ka']);
  assert.deepEqual(reports, ['b.ipynb: session gone']);
});
