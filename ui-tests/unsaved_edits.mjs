/**
 * Issue 27.2 in a real browser: edits left unsaved in the lab are saved by a pause that the lab's
 * button did not start. Run by tests/test_ui_saves.py, which starts JupyterLab (release backend
 * `none`) and passes: LAB_URL, LAB_TOKEN, CHROMIUM, MODE:
 *   `magic`: open a.ipynb and b.ipynb; in b run a cell, then type a line and leave it unsaved;
 *            in a run `%pause`; wait for `paused`.
 *   `idle`:  open a.ipynb; run a cell, type a line and leave it unsaved; wait for the idle pause.
 * Prints one JSON line (`{"dirty": [paths unsaved before the pause], "dirtyAfter": [...]}`);
 * exits 1 on any failure.
 */

import { kernelIdle, launchChromium } from './browser.mjs';

const { LAB_URL, LAB_TOKEN, CHROMIUM, MODE } = process.env;
const WAIT = 120_000; // a safety net against hangs, not a speed requirement

/** Type `code` into the current notebook's last cell; run it unless `run` is false. */
async function typeInLastCell(page, code, run = true) {
  const cells = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell');
  const cell = cells.nth((await cells.count()) - 1);
  await cell.locator('.cm-content').click();
  await page.keyboard.type(code);
  if (run) {
    await page.keyboard.press('Shift+Enter');
    await cell.locator('.jp-InputPrompt', { hasText: /\[\d+\]/ }).waitFor({ timeout: WAIT });
  }
}

async function open(page, path) {
  await page.evaluate(p => window.jupyterapp.commands.execute('docmanager:open', { path: p }), path);
  await page.waitForFunction(
    p => window.jupyterapp.shell.currentWidget?.context?.path === p,
    path,
    { timeout: WAIT, polling: 250 }
  );
  await kernelIdle(page, WAIT);
}

const dirtyPaths = page =>
  page.evaluate(() =>
    [...window.jupyterapp.shell.widgets('main')]
      .filter(w => w.context?.model.dirty)
      .map(w => w.context.path)
  );

async function main() {
  const browser = await launchChromium(CHROMIUM);
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(`${LAB_URL}lab/tree/a.ipynb?token=${LAB_TOKEN}`);
    await kernelIdle(page, WAIT);
    let dirty;
    if (MODE === 'magic') {
      await open(page, 'b.ipynb');
      await typeInLastCell(page, 'y = 2');
      await typeInLastCell(page, 'edited_in_b = 1', false);
      await open(page, 'a.ipynb');
      dirty = await dirtyPaths(page);
      await typeInLastCell(page, '%pause');
    } else {
      await typeInLastCell(page, 'x = 1');
      await typeInLastCell(page, 'edited_before_idle = 1', false);
      dirty = await dirtyPaths(page);
    }
    await page
      .locator('.jp-gkeresume-status[data-state="paused"]')
      .waitFor({ timeout: WAIT });
    console.log(JSON.stringify({ dirty, dirtyAfter: await dirtyPaths(page) }));
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
