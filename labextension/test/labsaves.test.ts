import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  documentLines,
  IOpenDocument,
  ISaveAnswer,
  ISaveRequest,
  LabSaves,
  saveDocuments
} from '../src/labsaves';

function doc(path: string, dirty: boolean, readOnly = false, fail?: string): IOpenDocument & {
  saves: number;
} {
  const d = {
    path,
    dirty,
    readOnly,
    saves: 0,
    save: async () => {
      if (fail) {
        throw new Error(fail);
      }
      d.saves += 1;
    }
  };
  return d;
}

test('saveDocuments saves each dirty document once and names each failure', async () => {
  const a = doc('a.ipynb', true);
  const b = doc('b.ipynb', false);
  const answer = await saveDocuments([
    a,
    a,
    b,
    doc('ro.ipynb', true, true),
    doc('full.ipynb', true, false, 'disk full')
  ]);
  assert.deepEqual(answer.saved, ['a.ipynb']);
  assert.equal(a.saves, 1);
  assert.equal(b.saves, 0);
  assert.deepEqual(
    answer.not_saved.sort((x, y) => x.path.localeCompare(y.path)),
    [
      { path: 'full.ipynb', reason: 'disk full' },
      { path: 'ro.ipynb', reason: 'read-only' }
    ]
  );
});

test('saveDocuments names a save that does not finish in time', async () => {
  const stuck: IOpenDocument = {
    path: 'stuck.ipynb',
    dirty: true,
    readOnly: false,
    save: () => new Promise<void>(() => undefined) // a "File Changed" dialog nobody answers
  };
  const answer = await saveDocuments([stuck, doc('ok.ipynb', true)], 50);
  assert.deepEqual(answer.saved, ['ok.ipynb']);
  assert.equal(answer.not_saved.length, 1);
  assert.equal(answer.not_saved[0].path, 'stuck.ipynb');
  assert.match(answer.not_saved[0].reason, /not saved within 0.05 s/);
});

test('LabSaves answers an open request only, with its page id, and keeps polling', async () => {
  const replies: ISaveRequest[] = [
    { request: 3, open: false }, // the page loads after three earlier pauses: nothing to do
    { request: 4, open: true }
  ];
  const polls: number[] = [];
  const answers: [string, number, ISaveAnswer][] = [];
  let release: () => void = () => undefined;
  const saves = new LabSaves(
    {
      next: async (_lab, after) => {
        polls.push(after);
        const reply = replies.shift();
        if (reply) {
          return reply;
        }
        await new Promise<void>(resolve => (release = resolve));
        return { request: after, open: false };
      },
      answer: async (lab, request, answer) => answers.push([lab, request, answer])
    },
    () => [doc('edited.ipynb', true), doc('clean.ipynb', false)]
  );
  const answered = saves.answered;
  saves.start();
  assert.equal(await answered, 4);
  assert.deepEqual(answers, [[saves.lab, 4, { saved: ['edited.ipynb'], not_saved: [] }]]);
  assert.deepEqual(polls.slice(0, 3), [0, 3, 4]);
  assert.match(saves.lab, /^[0-9a-f]{24}$/);
  saves.dispose();
  release();
});

test('documentLines names what was not saved and the labs that did not answer', () => {
  assert.deepEqual(documentLines(null), []);
  assert.deepEqual(
    documentLines({ saved: ['a.ipynb'], not_saved: [], labs: 1, unanswered: 0 }),
    []
  );
  assert.deepEqual(
    documentLines({
      saved: [],
      not_saved: [{ path: 'b.ipynb', reason: 'read-only' }],
      labs: 2,
      unanswered: 1
    }),
    [
      'Not saved: b.ipynb (read-only).',
      'One open lab did not answer in time: edits not saved there are not in the snapshot.'
    ]
  );
});
