import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  formatAge,
  formatBytes,
  formatDuration,
  formatRate,
  formatUTC,
  plural
} from '../src/format';

test('bytes use binary units with one decimal below 100', () => {
  assert.equal(formatBytes(0), '0 B');
  assert.equal(formatBytes(1023), '1023 B');
  assert.equal(formatBytes(1536), '1.5 KiB');
  assert.equal(formatBytes(2 * 1024 ** 3), '2.0 GiB');
  assert.equal(formatBytes(512 * 1024 ** 2), '512 MiB');
  assert.equal(formatBytes(-1), '?');
  assert.equal(formatRate(100 * 1024 ** 2), '100 MiB/s');
});

test('durations read naturally', () => {
  assert.equal(formatDuration(0.2), 'under a second');
  assert.equal(formatDuration(42), '42 s');
  assert.equal(formatDuration(75), '1 min 15 s');
  assert.equal(formatDuration(120), '2 min');
  assert.equal(formatDuration(4000), '1 h 7 min');
  assert.equal(formatDuration(NaN), '?');
});

test('ages are relative to now', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');
  assert.equal(formatAge('2026-11-30T11:59:50Z', now), 'just now');
  assert.equal(formatAge('2026-11-30T11:55:00Z', now), '5 min ago');
  assert.equal(formatAge('2026-11-30T10:30:00Z', now), '1 h 30 min ago');
  assert.equal(formatAge('2026-11-20T12:00:00Z', now), '10 days ago');
  assert.equal(formatAge(null, now), 'unknown time');
  assert.equal(plural(1, 'object'), '1 object');
  assert.equal(plural(2, 'object'), '2 objects');
});

test('ISO times are shown as UTC minutes', () => {
  assert.equal(formatUTC('2026-11-30T10:15:00Z'), '2026-11-30 10:15 UTC');
  assert.equal(formatUTC('2026-11-30T10:15:00.123Z'), '2026-11-30 10:15 UTC');
  assert.equal(formatUTC('yesterday'), 'yesterday');
});
