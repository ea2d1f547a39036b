/** Human-readable sizes, rates, durations and ages (pure functions). */

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** 1536 -> "1.5 KiB"; 0 -> "0 B". */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) {
    return '?';
  }
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** Bytes per second -> "100 MiB/s". */
export function formatRate(bytesPerSecond: number): string {
  return `${formatBytes(bytesPerSecond)}/s`;
}

/** 75 -> "1 min 15 s"; 4000 -> "1 h 7 min"; 0.4 -> "under a second". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) {
    return '?';
  }
  if (seconds < 1) {
    return 'under a second';
  }
  const s = Math.round(seconds);
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    const rest = s % 60;
    return rest ? `${Math.floor(s / 60)} min ${rest} s` : `${s / 60} min`;
  }
  const minutes = Math.round((s % 3600) / 60);
  return minutes ? `${Math.floor(s / 3600)} h ${minutes} min` : `${Math.floor(s / 3600)} h`;
}

/** An expected duration: "about 12 s", or "under a second" (never "about < 1 s"). */
export function aboutDuration(seconds: number): string {
  return seconds < 1 ? 'under a second' : `about ${formatDuration(seconds)}`;
}

/** How long ago an ISO 8601 time was, from `now` (ms since the epoch): "5 min ago". */
export function formatAge(iso: string | null | undefined, now: number): string {
  const then = iso ? Date.parse(iso) : NaN;
  if (Number.isNaN(then)) {
    return 'unknown time';
  }
  const seconds = (now - then) / 1000;
  if (seconds < 45) {
    return 'just now';
  }
  if (seconds < 86400 * 2) {
    return `${formatDuration(seconds).replace(/ \d+ s$/, '')} ago`;
  }
  return `${Math.floor(seconds / 86400)} days ago`;
}

/** "1 object", "2 objects". */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** "2026-11-30T10:15:00Z" -> "2026-11-30 10:15 UTC" (other strings are returned as they are). */
export function formatUTC(iso: string): string {
  const match = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(:\d\d(\.\d+)?)?Z$/.exec(iso);
  return match ? `${match[1]} ${match[2]} UTC` : iso;
}
