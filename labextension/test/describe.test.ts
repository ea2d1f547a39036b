import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  STATE_LABELS,
  describeStatus,
  notebookBadge,
  pauseSummary,
  releaseAction,
  releaseDone,
  resumeSummary,
  shortPath,
  snapshotLabel,
  waitingText
} from '../src/describe';
import { estimateText, resumeOffer, worstVerdict } from '../src/offer';
import { progressSentence, rateKnown, secondsLeft } from '../src/progress';
import { ISnapshotRow, IStatus, STATES } from '../src/types';
import { checkpoint, kernel, operation, status } from './fixtures';

const MIB = 1024 ** 2;
const NOW = Date.parse('2026-11-30T10:20:00Z');

test('every state has a label, and the status bar shows it', () => {
  for (const state of STATES) {
    assert.ok(STATE_LABELS[state], state);
    const view = describeStatus(status(state, { since: NOW / 1000 }), NOW);
    assert.equal(view.state, state);
    assert.ok(view.label.startsWith(STATE_LABELS[state]), view.label);
    assert.match(view.title, /hub-alice/);
  }
  assert.equal(describeStatus(status('running'), NOW).tone, 'idle');
  assert.equal(describeStatus(status('pausing'), NOW).tone, 'busy');
  assert.equal(describeStatus(status('releasing'), NOW).tone, 'busy');
  assert.equal(describeStatus(status('waiting_for_resources'), NOW).tone, 'busy');
  assert.equal(describeStatus(status('paused'), NOW).tone, 'good');
  assert.equal(describeStatus(status('ready', { since: NOW / 1000 }), NOW).tone, 'good');
  assert.equal(describeStatus(status('failed'), NOW).tone, 'bad');
});

test('ready reads "Running (resumed)" just after a resume, then plain "Running"', () => {
  const ready = status('ready', { since: NOW / 1000 - 3 });
  assert.equal(describeStatus(ready, NOW).label, 'Running (resumed)');
  const later = describeStatus(ready, NOW + 60_000);
  assert.equal(later.label, 'Running');
  assert.equal(later.state, 'running');
  assert.equal(later.tone, 'idle');
});

/** Labels must read as one sentence: no phase word twice, no "%" beside a byte count. */
function oneSentence(label: string): void {
  const words = label.toLowerCase().match(/[a-z]+/g) ?? [];
  for (const verb of ['writing', 'reading', 'verifying', 'releasing', 'pausing', 'hashing']) {
    assert.ok(words.filter(w => w === verb).length <= 1, `"${verb}" twice in: ${label}`);
  }
  assert.ok(!/\.\.\.|·/.test(label), `a list, not a sentence: ${label}`);
  assert.ok(!/GPU/.test(label.replace(/freeing \d+ GPUs?/, '')), `GPU named without a count: ${label}`);
}

const writing = (done: number, total: number, rate = 100 * MIB) => ({
  phase: 'writing' as const,
  done_bytes: done,
  total_bytes: total,
  rate,
  seconds: 5
});

test('pausing: one sentence with bytes, rate and the time left; the bar spans the operation', () => {
  const s = status('pausing', {
    operation: operation({ started: NOW / 1000 - 5 }),
    kernels: [kernel({ state: 'pausing', progress: writing(512 * MIB, 2048 * MIB) })]
  });
  const view = describeStatus(s, NOW);
  assert.equal(view.label, 'Pausing: writing 512 MiB of 2.0 GiB at 100 MiB/s, about 15 s left');
  oneSentence(view.label);
  assert.equal(view.progress?.fraction, 0.75 * 0.25);
  assert.equal(view.progress?.text, 'writing 512 MiB of 2.0 GiB at 100 MiB/s, about 15 s left');
  assert.match(view.title, /^Workspace hub-alice: Pausing: writing 512 MiB/);
  assert.equal(view.cancellable, false);
});

test('the learned estimate gives the time left and moves the bar in phases without bytes', () => {
  const op = operation({ started: NOW / 1000 - 6, estimate_seconds: 10, cancellable: true });
  // The phase's own rate says 1 s, the workspace's history says 4 s more: the larger one.
  const s = status('pausing', {
    operation: op,
    kernels: [kernel({ state: 'pausing', progress: writing(900 * MIB, 1000 * MIB) })]
  });
  const view = describeStatus(s, NOW);
  assert.equal(view.label, 'Pausing: writing 900 MiB of 1000 MiB at 100 MiB/s, about 4 s left');
  assert.equal(view.cancellable, true);
  // Releasing has no bytes: the bar sits inside its band by elapsed / estimate.
  const releasing = status('releasing', { operation: { ...op, started: NOW / 1000 - 9.8 } });
  const r = describeStatus(releasing, NOW);
  assert.equal(r.label, 'Releasing: stopping the kernels, under a second left');
  assert.ok(r.progress && r.progress.fraction! >= 0.95 && r.progress.fraction! <= 1);
  // Nothing known: an indeterminate bar, still shown.
  const bare = describeStatus(status('releasing', { operation: operation() }), NOW);
  assert.equal(bare.label, 'Releasing: stopping the kernels');
  assert.equal(bare.progress?.fraction, 0.95);
  const starting = describeStatus(
    status('waiting_for_resources', { operation: operation({ kind: 'resume' }) }),
    NOW
  );
  assert.equal(starting.label, 'Resuming: starting the kernels');
  assert.equal(starting.progress?.fraction, 0);
});

test('no rate and no time left from a first sample: the learned estimate, or none', () => {
  // Issue 23's first samples: 128 B of 1.4 GiB written in 10 ms ("about 30 h 15 min left"),
  // and 8 MiB of a resume read while its kernel started ("about 2 min 27 s left").
  const header = { phase: 'writing' as const, done_bytes: 128, total_bytes: 1.4 * 1024 * MIB, rate: 13_517, seconds: 0.0095 };
  const read = { phase: 'reading' as const, done_bytes: 8 * MIB, total_bytes: 512 * MIB, rate: 3.5 * MIB, seconds: 2.3 };
  assert.equal(rateKnown(header), false);
  assert.equal(rateKnown(read), false, '8 MiB of 512 MiB is too little to tell a rate');
  assert.equal(secondsLeft(operation(), header, NOW / 1000), null);
  const bare = describeStatus(
    status('pausing', { operation: operation(), kernels: [kernel({ state: 'pausing', progress: header })] }),
    NOW
  );
  assert.equal(bare.label, 'Pausing: writing 128 B of 1.4 GiB');
  const learned = operation({ kind: 'resume', started: NOW / 1000 - 2, estimate_seconds: 5 });
  const resuming = describeStatus(
    status('restoring', { operation: learned, kernels: [kernel({ state: 'restoring', progress: read })] }),
    NOW
  );
  assert.equal(resuming.label, 'Resuming: reading 8.0 MiB of 512 MiB, about 3 s left');
  // Once the phase ran a second over 5 % of its bytes, its rate is said and counts.
  const later = { ...read, done_bytes: 256 * MIB, rate: 128 * MIB, seconds: 2 };
  assert.equal(rateKnown(later), true);
  assert.equal(progressSentence(later, secondsLeft(null, later, NOW / 1000)), 'reading 256 MiB of 512 MiB at 128 MiB/s, about 2 s left');
});

test('the bar only moves forwards through a pause: writing, verifying, releasing', () => {
  const op = operation();
  const at = (state: 'pausing' | 'releasing', phase: string, done: number, total: number) =>
    describeStatus(
      status(state, {
        operation: op,
        kernels: [
          kernel({
            state,
            progress: { phase: phase as 'writing', done_bytes: done, total_bytes: total, rate: MIB, seconds: 1 }
          })
        ]
      }),
      NOW
    ).progress!.fraction!;
  const seen = [
    at('pausing', 'writing', 0, 100),
    at('pausing', 'writing', 50, 100),
    at('pausing', 'writing', 100, 100),
    at('pausing', 'committing', 100, 100),
    at('pausing', 'verifying', 10, 100),
    at('releasing', 'verifying', 90, 100),
    at('releasing', 'releasing', 0, 0)
  ];
  for (let i = 1; i < seen.length; i++) {
    assert.ok(seen[i] >= seen[i - 1], `${seen}`);
  }
  assert.ok(seen[seen.length - 1] > 0.9);
});

test('verifying while releasing reads as pausing, never "Releasing the GPU verifying"', () => {
  const s = status('releasing', {
    operation: operation(),
    kernels: [
      kernel({
        state: 'releasing',
        progress: { phase: 'verifying', done_bytes: 764 * MIB, total_bytes: 764 * MIB, rate: 0, seconds: 1 }
      })
    ]
  });
  const view = describeStatus(s, NOW);
  assert.equal(view.label, 'Pausing: verifying 764 MiB of 764 MiB');
  oneSentence(view.label);
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
    operation: operation({ kind: 'resume', kernels: ['a', 'b'] }),
    kernels: [
      kernel({ kernel_id: 'a', state: 'restoring', progress: p(1 * MIB, 4 * MIB) }),
      kernel({ kernel_id: 'b', state: 'restoring', progress: p(3 * MIB, 4 * MIB) }),
      kernel({ kernel_id: 'c', state: 'ready', progress: p(9 * MIB, 9 * MIB) })
    ]
  });
  const view = describeStatus(both, NOW);
  assert.equal(view.progress?.fraction, 0.05 + 0.85 * 0.5);
  assert.equal(view.label, 'Resuming: reading 4.0 MiB of 8.0 MiB at 2.0 MiB/s, about 2 s left');
  oneSentence(view.label);
  const unknown = describeStatus(
    status('pausing', { kernels: [kernel({ state: 'pausing', progress: p(MIB, 0) })] }),
    NOW
  );
  assert.equal(unknown.progress?.fraction, null);
  assert.equal(unknown.label, 'Pausing: reading 1.0 MiB at 1.0 MiB/s');
});

test('a queued pause says which cell it waits for and for how long it has run', () => {
  const waiting = { kernel_id: 'k1', notebook: 'train.ipynb', execution_count: 12, running_seconds: 125 };
  assert.equal(waitingText(waiting), 'waiting for cell 12 of train.ipynb (running for 2 min 5 s)');
  const s = status('pausing', { operation: operation({ waiting_for: waiting, cancellable: true }) });
  const view = describeStatus(s, NOW);
  assert.equal(view.label, 'Pause queued: waiting for cell 12 of train.ipynb (running for 2 min 5 s)');
  assert.equal(view.cancellable, true);
  assert.equal(
    waitingText({ kernel_id: 'k1', notebook: null, execution_count: null, running_seconds: 7200 }),
    'waiting for the running cell (running for 2 h)'
  );
  assert.equal(
    waitingText({ kernel_id: 'k1', notebook: 'a.ipynb', execution_count: null, running_seconds: null }),
    'waiting for the running cell of a.ipynb'
  );
});

test('releases say what happens on this deployment; GPUs only when there were', () => {
  assert.equal(releaseAction('none', 0), 'stopping the kernels');
  assert.equal(releaseAction('none', null), 'stopping the kernels');
  assert.equal(releaseAction('none', 2), 'stopping the kernels, freeing 2 GPUs');
  assert.equal(releaseAction('jupyterhub', 1), 'stopping this server through JupyterHub, freeing 1 GPU');
  assert.equal(releaseAction('kubeflow', 0), 'releasing the pod through Kubeflow');
  assert.equal(releaseDone('none', 0), 'The kernels were stopped; this server keeps running.');
  assert.equal(releaseDone('none', 1), 'The kernels were stopped, freeing 1 GPU; this server keeps running.');
  assert.equal(
    releaseDone('jupyterhub', 0),
    'The kernels were stopped and this server was stopped through JupyterHub.'
  );
  assert.equal(
    releaseDone('kubeflow', 4),
    'The kernels were stopped and the pod was released through Kubeflow, giving back 4 GPUs.'
  );
  const paused = describeStatus(status('paused', { paused: { ...RECORD, gpus: 0 }, kernels: [] }), NOW);
  assert.ok(!/\d GPU/.test(paused.title), paused.title);
  assert.match(paused.title, /The kernels were stopped; this server keeps running\./);
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
  assert.equal(back.label, 'Running (the last pause failed)');
  assert.equal(back.tone, 'bad');
  assert.match(back.title, /The last pause failed: pause failed, nothing was released: 403/);
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
  assert.ok(message.lines.includes('The kernels were stopped, freeing 1 GPU; this server keeps running.'));
  assert.ok(!message.lines.some(l => /release backend/.test(l)));
  const noGpu = pauseSummary(status('paused', { paused: { ...RECORD, gpus: 0 }, kernels: [] }), []);
  assert.ok(!noGpu.lines.some(l => /\d GPU/.test(l)), noGpu.lines.join('\n'));
  assert.ok(message.lines.includes('Notebooks: work/train.ipynb, eval.ipynb.'));
});

test('pause summary names the open terminals a release ends', () => {
  const released = { paused: { ...RECORD, release_backend: 'jupyterhub' }, kernels: [], terminals: ['1', '3'] };
  const message = pauseSummary(status('paused', released), [checkpoint()]);
  assert.ok(message.lines.includes('Not carried: 2 terminals (1, 3) end with the pod.'), message.lines.join('\n'));
  const kept = pauseSummary(status('paused', { ...released, paused: RECORD }), [checkpoint()]);
  assert.ok(!kept.lines.some(l => /terminal/.test(l)), 'backend none: the server and its terminals stay');
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
      saved: ['model', 'opt', 'x'],
      packages: ['tinypkg 1.0']
    })
  ];
  const offer = resumeOffer(status('paused', { paused: RECORD }), rows)!;
  assert.deepEqual(offer.packages, ['tinypkg 1.0']);
  assert.equal(offer.pausedAt, '2026-11-30T10:15:00Z');
  assert.deepEqual(offer.notebooks, ['work/train.ipynb', 'eval.ipynb']);
  assert.equal(offer.bytes, 1000 * MIB);
  // No operation measured on this store yet: no estimate, rather than a constant rate's guess.
  assert.equal(offer.estimateSeconds, null);
  assert.match(estimateText(offer), /^1000 MiB \(no estimate yet/);
  const learned = resumeOffer(status('paused', { paused: RECORD, resume_estimate_seconds: 42 }), rows)!;
  assert.equal(learned.estimateSeconds, 42);
  assert.equal(estimateText(learned), 'about 42 s for 1000 MiB (measured on this store)');
  assert.equal(offer.pausedByShutdown, false);
  const shutdown = resumeOffer(status('paused', { paused: { ...RECORD, reason: 'shutdown' } }), rows)!;
  assert.equal(shutdown.pausedByShutdown, true);
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
          seconds: 1,
          paths: ['/data/cache: 3 files put back (34 B)']
        }
      })
    ]
  });
  const message = resumeSummary(ready, op);
  assert.equal(message.title, 'Workspace resumed');
  assert.equal(message.lines[0], 'Restored 2 objects into 1 kernel: x, model');
  assert.ok(message.lines.includes('Not restored: gen (generator): was not saved'));
  assert.ok(message.lines.includes('Warning: cuda:1 mapped to cuda:0'));
  assert.ok(message.lines.includes('Extra path: /data/cache: 3 files put back (34 B)'));
  const failed = resumeSummary(status('failed', { reason: 'resume failed: boom' }), op);
  assert.equal(failed.title, 'Resume failed');
  assert.equal(failed.lines[0], 'resume failed: boom');
  const unnamed = resumeSummary(ready, operation({ kind: 'resume', mode: 'full', kernels: [] }));
  assert.equal(unnamed.lines[0], 'Restored 2 objects into 1 kernel: x, model');
  const fresh = resumeSummary(status('ready'), operation({ kind: 'resume', mode: 'files-only' }));
  assert.equal(fresh.title, 'Started fresh');
});

test('a paused notebook says so in its toolbar; other notebooks say nothing', () => {
  const paused = status('paused', { paused: RECORD, kernels: [] });
  assert.equal(notebookBadge(paused, 'work/train.ipynb')?.title, 'Paused');
  assert.match(notebookBadge(paused, 'work/train.ipynb')!.lines.join(' '), /snapshot s1/);
  assert.equal(notebookBadge(paused, 'other.ipynb'), null);
  assert.equal(notebookBadge(status('running'), 'work/train.ipynb'), null);
  const pausing = status('pausing', { operation: operation(), kernels: [kernel({ state: 'pausing' })] });
  assert.equal(notebookBadge(pausing, 'work/train.ipynb')?.title, 'Pausing');
  assert.equal(notebookBadge(null, 'x.ipynb'), null);
});

test('unnamed snapshots get a readable label: notebook, age, size, why', () => {
  const now = Date.parse('2026-11-30T10:20:00Z');
  const unnamed = row('20261130T101500Z-a1b2c3', { notebook: 'work/train.ipynb', bytes: 512 * MIB });
  assert.equal(snapshotLabel(unnamed, null, now), 'work/train.ipynb · 5 min ago · 512 MiB');
  const paused = status('paused', {
    paused: { ...RECORD, kernels: [{ ...RECORD.kernels[0], snapshot_id: unnamed.id }] }
  });
  assert.equal(snapshotLabel(unnamed, paused, now), 'work/train.ipynb · 5 min ago · 512 MiB · paused');
  assert.match(snapshotLabel({ ...unnamed, reason: 'idle' }, null, now), / · auto$/);
  assert.match(snapshotLabel({ ...unnamed, reason: 'shutdown' }, null, now), / · shutdown$/);
  assert.equal(snapshotLabel({ ...unnamed, name: 'before-eval' }, paused, now), 'before-eval');
  assert.equal(snapshotLabel(row('s9', { notebook: null }), null, now), 'no notebook · 5 min ago · 0 B');
});

test('long notebook paths are shortened from the left with an ellipsis', () => {
  assert.equal(shortPath('a/b.ipynb'), 'a/b.ipynb');
  assert.equal(shortPath('home/omer/projects/repo/notebooks/Untitled.ipynb', 32), '…/repo/notebooks/Untitled.ipynb');
  assert.equal(shortPath('x'.repeat(50) + '.ipynb', 20).length, 20);
  assert.ok(shortPath('x'.repeat(50) + '.ipynb', 20).startsWith('…'));
});
