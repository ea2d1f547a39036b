/**
 * Issue 20.3: JupyterLab open in a real browser, and nobody touching it. Run by
 * tests/test_ui_idle.py, which starts JupyterLab with a short idle timeout and passes:
 *   LAB_URL (http://127.0.0.1:PORT/), LAB_TOKEN, NOTEBOOK (path in the root dir),
 *   CHROMIUM (executable).
 * Opens the notebook, waits until its kernel is connected and idle, prints `open`, then keeps the
 * page open (the lab polls kernels, sessions, contents and terminals as it always does) until
 * the test closes stdin. Exits 1 on any failure, with the error on stderr.
 */

import { kernelIdle, launchChromium } from './browser.mjs';

const { LAB_URL, LAB_TOKEN, NOTEBOOK, CHROMIUM } = process.env;
const WAIT = 120_000; // a safety net against hangs, not a speed requirement

async function main() {
  const browser = await launchChromium(CHROMIUM);
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(`${LAB_URL}lab/tree/${NOTEBOOK}?token=${LAB_TOKEN}`);
    await kernelIdle(page, WAIT);
    console.log('open');
    // the page stays open, untouched, until the test closes our stdin
    await new Promise(resolve => {
      process.stdin.on('end', resolve);
      process.stdin.on('close', resolve);
      process.stdin.resume();
    });
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
