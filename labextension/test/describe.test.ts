import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  STATE_LABELS,
  describeStatus,
  pauseSummary,
  resumeOffer,
  resumeSummary,
  worstVerdict
} from '../src/describe';
import { ISnapshotRow, IStatus, STATES } from '../src/types';
import { checkpoint, kernel, operation, status } from './fixtures';

const MIB = 1024 ** 2;

test('every state has a label, and the status bar shows it', () => {
  for (const state of STATES) {
    assert.ok(STATE_LABELS[state], state);
    const view = describeStatus(status(state));
    assert.equal(view.state, state);
    assert.ok(view.label.startsWith(STATE_LABELS[state]), view.label);
    assert.match(view.title, /hub-alice/);
  }
  assert.equal(describeStatus(status('running')).tone, 'idle');
  assert.equal(describeStatus(status('pausing')).tone, 'busy');
  assert.equal(describeStatus(status('releasing')).tone, 'busy');
  assert.equal(describeStatus(status('waiting_for_resources')).tone, 'busy');
  assert.equal(describeStatus(status('paused')).tone, 'good');
  assert.equal(describeStatus(status('ready')).tone, 'good');
  assert.equal(describeStatus(status('failed')).tone, 'bad');
});

test('pausing shows the phase, a progress fraction, bytes and rate', () => {
  const s = status('pausing', {
    operation: operation(),
    kernels: [
      kernel({
        state: 'pausing',
        progress: {
          phase: 'writing',
          done_bytes: 512 * MIB,
          total_bytes: 2048 * MIB,
          rate: 100 * MIB,
          seconds: 5
        }
      })
    ]
  });
  const view = describeStatus(s);
  assert.equal(view.label, 'Pausing: writing 25%');
  assert.equal(view.progress?.fraction, 0.25);
  assert.equal(view.progress?.text, 'writing 512 MiB / 2.0 GiB · 100 MiB/s');
  assert.match(view.title, /writing 512 MiB/);
});

test('progress of several kernels adds up; an unknown total is indeterminate', () => {
  const p = (done: number, total: number) => ({
    phase: 'reading' as const,
    done_bytes: done,
    total_bytes: total,
    rate: MIB,
    seconds: 1
  });
  const both = status('restoring', {
    kernels: [
      kernel({ kernel_id: 'a', state: 'restoring', progress: p(1 * MIB, 4 * MIB) }),
      kernel({ kernel_id: 'b', state: 'restoring', progress: p(3 * MIB, 4 * MIB) }),
      kernel({ kernel_id: 'c', state: 'ready', progress: p(9 * MIB, 9 * MIB) })
    ]
  });
  const view = describeStatus(both);
  assert.equal(view.progress?.fraction, 0.5);
  assert.equal(view.label, 'Restoring: reading 50%');
  assert.equal(view.progress?.text, 'reading 4.0 MiB / 8.0 MiB · 2.0 MiB/s');
  const unknown = describeStatus(
    status('pausing', { kernels: [kernel({ state: 'pausing', progress: p(MIB, 0) })] })
  );
  assert.equal(unknown.progress?.fraction, null);
  assert.equal(unknown.label, 'Pausing: reading');
});

test('failures are told, never hidden', () => {
  const failed = describeStatus(status('failed', { reason: 'resume failed: store unreachable' }));
  assert.equal(failed.label, 'Failed: resume failed: store unreachable');
  assert.equal(failed.tone, 'bad');
  const back = describeStatus(
    status('running', {
      reason: 'pause failed, nothing was released: 403',
      last_error: { operation: 'pause', message: 'pause failed, nothing was released: 403', at: 1 }
    })
  );
  assert.equal(back.label, 'Running (last pause failed)');
  assert.equal(back.tone, 'bad');
  assert.match(back.title, /Last error \(pause\): pause failed, nothing was released: 403/);
});

const RECORD = {
  version: 1,
  workspace: 'hub-alice',
  paused_at: '2026-11-30T10:15:00Z',
  reason: 'user',
  release_backend: 'none',
  gpus: 1,
  kernels: [
    {
      kernel_id: 'k1',
      kernel_name: 'python3',
      notebook: 'work/train.ipynb',
      snapshot_id: 's1',
      bytes_total: 400 * MIB
    },
    {
      kernel_id: 'k2',
      kernel_name: 'python3',
      notebook: 'eval.ipynb',
      snapshot_id: 's2',
      bytes_total: 600 * MIB
    }
  ]
};

function row(id: string, over: Partial<ISnapshotRow> = {}): ISnapshotRow {
  return {
    id,
    name: null,
    created: '2026-11-30T10:15:00Z',
    notebook: null,
    bytes: 0,
    objects: 2,
    skipped: 0,
    verdict: { level: 'exact', reasons: [], objects_at_risk: {} },
    error: null,
    ...over
  };
}

test('pause summary lists what was saved, what was not and why, and the release', () => {
  const paused = status('paused', { paused: RECORD, kernels: [] });
  const message = pauseSummary(paused, [checkpoint()]);
  assert.equal(message.title, 'Workspace paused');
  assert.equal(message.lines[0], 'Saved 2 objects (2.0 KiB, 1.0 KiB new) from 1 kernel: x, model');
  assert.ok(message.lines.includes('Not saved: gen (generator): cannot pickle generator objects'));
  assert.ok(message.lines.some(l => /GPU was released \(release backend: none\)/.test(l)));
  assert.ok(message.lines.includes('Notebooks: work/train.ipynb, eval.ipynb.'));
});

test('pause summary passes on the warnings of the checkpoints it saw', () => {
  const warning = '3.0 GiB of GPU memory copied by torch through host memory as large: no driver';
  const message = pauseSummary(status('running'), [checkpoint({ warnings: [warning] })]);
  assert.ok(message.lines.includes(`Warning: ${warning}`));
});

test('pause summary names what the paused record says each kernel saved', () => {
  const kernels = RECORD.kernels.map((k, i) => ({
    ...k,
    bytes_new: MIB,
    saved: [['x'], ['model', 'opt']][i],
    skipped: i ? [] : [{ name: 'lock', type: 'lock', reason: 'cannot pickle lock objects' }]
  }));
  const paused = status('paused', { paused: { ...RECORD, kernels }, kernels: [] });
  const message = pauseSummary(paused, [checkpoint()]); // the record wins: it names every kernel
  assert.equal(message.lines[0], 'Saved 3 objects (1000 MiB, 2.0 MiB new) from 2 kernels: x, model, opt');
  assert.ok(message.lines.includes('Not saved: lock (lock): cannot pickle lock objects'));
});

test('pause summary without results falls back on the record and the last snapshot', () => {
  const paused = status('paused', {
    paused: RECORD,
    kernels: [],
    last_snapshot: { id: 's2', objects: 3, skipped: 1, bytes: 600 * MIB }
  });
  const message = pauseSummary(paused, []);
  assert.equal(message.lines[0], 'Saved 3 objects (1000 MiB).');
  assert.match(message.lines[1], /^1 object could not be saved/);
  const checkpointOnly = pauseSummary(status('running'), [checkpoint({ skipped: [] })]);
  assert.equal(checkpointOnly.title, 'Checkpoint saved');
  assert.deepEqual(checkpointOnly.lines.slice(-1), ['The kernels keep running.']);
});

test('resume offer: when, size, estimate, the worst verdict with every reason', () => {
  const rows = [
    row('s1', { verdict: { level: 'portable', reasons: ['GPU L4 -> A100'], objects_at_risk: {} } }),
    row('s2', {
      verdict: {
        level: 'partial',
        reasons: ['opt: module apex is not importable'],
        objects_at_risk: { opt: 'module apex is not importable' }
      },
      saved: ['model', 'opt', 'x']
    })
  ];
  const offer = resumeOffer(status('paused', { paused: RECORD }), rows)!;
  assert.equal(offer.pausedAt, '2026-11-30T10:15:00Z');
  assert.deepEqual(offer.notebooks, ['work/train.ipynb', 'eval.ipynb']);
  assert.equal(offer.bytes, 1000 * MIB);
  assert.equal(offer.estimateSeconds, 1000 / 200 + 2 * 5);
  assert.equal(offer.level, 'partial');
  assert.deepEqual(offer.reasons, ['GPU L4 -> A100', 'opt: module apex is not importable']);
  assert.deepEqual(offer.problems, []);
  assert.equal(offer.canResume, true);
  // s1 does not list its saved names: the compatible subset cannot be named, so not offered.
  assert.equal(offer.compatibleObjects, null);
  assert.equal(offer.canResumeCompatible, false);
  rows[0].saved = ['y'];
  const named = resumeOffer(status('paused', { paused: RECORD }), rows)!;
  assert.deepEqual(named.compatibleObjects, ['y', 'model', 'x']);
  assert.equal(named.canResumeCompatible, false, 'an older record: one list for two kernels');
  const one = { ...RECORD, kernels: RECORD.kernels.slice(1) };
  const single = resumeOffer(status('paused', { paused: one }), rows)!;
  assert.deepEqual(single.compatibleObjects, ['model', 'x']);
  assert.equal(single.canResumeCompatible, true);
  // A record naming each kernel's saved objects: the server splits the list per kernel.
  const kernels = RECORD.kernels.map((k, i) => ({ ...k, saved: rows[i].saved, skipped: [] }));
  const perKernel = resumeOffer(status('paused', { paused: { ...RECORD, kernels } }), rows)!;
  assert.equal(perKernel.canResumeCompatible, true);
});

test('resume offer: unreadable or incompatible snapshots only allow starting fresh', () => {
  const rows = [
    row('s1', { error: 'signature does not match', verdict: null }),
    row('s2', { verdict: { level: 'incompatible', reasons: ['Python 2 -> 3'], objects_at_risk: {} } })
  ];
  const offer = resumeOffer(status('paused', { paused: RECORD }), rows)!;
  assert.deepEqual(offer.problems, ['s1: signature does not match']);
  assert.equal(offer.level, 'incompatible');
  assert.equal(offer.canResume, false);
  assert.equal(offer.canResumeCompatible, false);
  const missing = resumeOffer(status('paused', { paused: RECORD }), [])!;
  assert.equal(missing.level, null);
  assert.equal(missing.problems.length, 2);
  assert.equal(resumeOffer(status('running'), rows), null);
  assert.equal(worstVerdict([]), null);
});

test('resume summary: restored objects, the rest with reasons, or the failure', () => {
  const op = operation({ kind: 'resume', mode: 'full', kernels: ['k1'] });
  const ready: IStatus = status('ready', {
    kernels: [
      kernel({
        state: 'ready',
        result: {
          snapshot_id: 's1',
          restored: ['x', 'model'],
          not_restored: [{ name: 'gen', type: 'generator', reason: 'was not saved' }],
          warnings: ['cuda:1 mapped to cuda:0'],
          verdict: {},
          bytes_read: 10,
          seconds: 1
        }
      })
    ]
  });
  const message = resumeSummary(ready, op);
  assert.equal(message.title, 'Workspace resumed');
  assert.equal(message.lines[0], 'Restored 2 objects into 1 kernel: x, model');
  assert.ok(message.lines.includes('Not restored: gen (generator): was not saved'));
  assert.ok(message.lines.includes('Warning: cuda:1 mapped to cuda:0'));
  const failed = resumeSummary(status('failed', { reason: 'resume failed: boom' }), op);
  assert.equal(failed.title, 'Resume failed');
  assert.equal(failed.lines[0], 'resume failed: boom');
  const unnamed = resumeSummary(ready, operation({ kind: 'resume', mode: 'full', kernels: [] }));
  assert.equal(unnamed.lines[0], 'Restored 2 objects into 1 kernel: x, model');
  const fresh = resumeSummary(status('ready'), operation({ kind: 'resume', mode: 'files-only' }));
  assert.equal(fresh.title, 'Started fresh');
});
