/**
 * The one way the UI tests start Debian's chromium (never a downloaded browser): headless,
 * nothing that reaches outside the machine (no QUIC, sync, component updates or background
 * networking), no sandbox (CI runs as root) and no /dev/shm (small in containers).
 */

import { chromium } from 'playwright-core';

/** The browser at `executablePath` (the tests pass CHROMIUM), started for one script. */
export function launchChromium(executablePath) {
  return chromium.launch({
    executablePath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-dev-shm-usage'
    ]
  });
}

/** Until the current tab's kernel is connected and idle (`timeout`: a safety net against hangs). */
export async function kernelIdle(page, timeout) {
  await page.waitForFunction(
    () => {
      const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
      return kernel?.connectionStatus === 'connected' && kernel.status === 'idle';
    },
    null,
    { timeout, polling: 250 }
  );
}
