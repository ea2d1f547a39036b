/** Status objects shaped exactly like docs/api.md's examples, for the unit tests. */

import { ICheckpointResult, IKernelStatus, IOperation, IStatus, State } from '../src/types';

export function kernel(over: Partial<IKernelStatus> = {}): IKernelStatus {
  return {
    kernel_id: 'k1',
    kernel_name: 'python3',
    notebook: 'work/train.ipynb',
    execution_state: 'idle',
    state: 'running',
    reason: null,
    since: 1764497700.6,
    progress: null,
    snapshot_id: null,
    result: null,
    ...over
  };
}

export function operation(over: Partial<IOperation> = {}): IOperation {
  return {
    id: 'op-1',
    kind: 'pause',
    started: 1764497700.5,
    reason: 'user',
    release: true,
    mode: null,
    kernels: ['k1'],
    ...over
  };
}

export function status(state: State, over: Partial<IStatus> = {}): IStatus {
  return {
    workspace: 'hub-alice',
    store: 'gs://bucket/gkeresume',
    release_backend: 'none',
    state,
    reason: null,
    since: 1764497700.5,
    operation: null,
    kernels: [kernel()],
    last_snapshot: null,
    paused: null,
    last_error: null,
    ...over
  };
}

export function checkpoint(over: Partial<ICheckpointResult> = {}): ICheckpointResult {
  return {
    snapshot_id: '20261130T101500Z-a1b2c3',
    name: null,
    bytes_total: 2048,
    bytes_new: 1024,
    bytes_reused: 1024,
    seconds: 0.5,
    saved: ['x', 'model'],
    skipped: [{ name: 'gen', type: 'generator', reason: 'cannot pickle generator objects' }],
    timings: {},
    warnings: [],
    ...over
  };
}
