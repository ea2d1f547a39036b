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
});

test('no "about < 1 s": short times read as words', () => {
  assert.equal(formatDuration(0.4), 'under a second');
  const offer = resumeOffer(status('paused', { paused: record(), resume_estimate_seconds: 0.3 }), [])!;
  assert.equal(estimateText(offer), 'under a second for 677 MiB (measured on this store)');
});
