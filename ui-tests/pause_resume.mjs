/**
 * End to end in a real browser: Debian's chromium driven by playwright-core (no browser download).
 * Run by tests/test_ui_e2e.py, which starts JupyterLab (release backend `none`) and passes:
 *   LAB_URL (http://127.0.0.1:PORT/), LAB_TOKEN, NOTEBOOK (path in the root dir),
 *   CHROMIUM (executable), ARTIFACTS (folder for screenshots).
 *
 * First, Pause while a cell runs: the server refuses (409) and its message is shown.
 * The pause and the resume move a session of 512 MiB; while each runs, a recorder in the page
 * notes every change of the status bar (state, label, bar value) and of the open toasts, and
 * both progress states are photographed (docs/screenshots/ keeps copies).
 * Then the scenario of issue 5 (with a checkpoint from the GPU menu before the pause): open the notebook, run `x = 41 + 1`, click Pause, see the status reach
 * `paused`; reload; the resume dialog appears; click Resume; the status reaches `ready`; run
 * `print(x)` and read `42`. Prints one JSON line with what it saw; exits 1 on any failure (with a
 * screenshot of the page at that moment).
 */

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { kernelIdle, launchChromium } from './browser.mjs';

const { LAB_URL, LAB_TOKEN, NOTEBOOK, CHROMIUM, ARTIFACTS } = process.env;
const WAIT = 120_000; // a safety net against hangs, not a speed requirement
const seen = { steps: [] };

function step(name) {
  seen.steps.push(name);
  console.error(`[e2e] ${name}`);
}

async function shot(page, name) {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

/** The current notebook's kernel is connected and idle (JupyterLab runs with
 * expose_app_in_browser, so the app's own state says it, not a widget that may render early). */
/** Type `code` into the notebook's last (empty) cell and run it; returns that cell. Running
 * the last cell appends a new empty one, so the last cell is always the next to use. */
async function runCode(page, code) {
  const cells = page.locator('.jp-Notebook .jp-Cell');
  const cell = cells.nth((await cells.count()) - 1);
  await cell.locator('.cm-content').click();
  await page.keyboard.type(code);
  await page.keyboard.press('Shift+Enter');
  return cell;
}

async function executed(cell) {
  await cell.locator('.jp-InputPrompt', { hasText: /\[\d+\]/ }).waitFor({ timeout: WAIT });
}

async function statusState(page, state) {
  await page.locator(`.jp-gkeresume-status[data-state="${state}"]`).waitFor({ timeout: WAIT });
}

/** Start noting, in the page, every change of the status item and of the toasts shown (a toast
 * leaving, with its exit animation, no longer counts). `stopRecorder` returns the notes. */
async function startRecorder(page) {
  await page.evaluate(() => {
    const notes = [];
    let last = '';
    const sample = () => {
      const item = document.querySelector('.jp-gkeresume-status');
      const bar = document.querySelector('.jp-gkeresume-progress');
      const cancel = document.querySelector('.jp-gkeresume-cancel');
      const toasts = [...document.querySelectorAll('.Toastify__toast')]
        .filter(t => !/exit/.test(t.className))
        .map(t => t.innerText.split('\n')[0]);
      const note = {
        ms: Math.round(performance.now()),
        state: item?.dataset.state ?? null,
        label: document.querySelector('.jp-gkeresume-label')?.textContent ?? '',
        value: bar && !bar.hidden && bar.hasAttribute('value') ? bar.value : null,
        barShown: !!bar && !bar.hidden,
        cancelShown: !!cancel && cancel.checkVisibility(),
        toasts,
        dialog: document.querySelector('.jp-Dialog .jp-gkeresume-message')?.innerText ?? null
      };
      const key = JSON.stringify({ ...note, ms: 0 });
      if (key !== last) {
        last = key;
        notes.push(note);
      }
    };
    const observer = new MutationObserver(sample);
    observer.observe(document.body, {
      subtree: true,
      childList: true,
      attributes: true,
      characterData: true
    });
    window.__gkeresumeRecorder = { notes, observer };
    sample();
  });
}

async function stopRecorder(page) {
  return page.evaluate(() => {
    const recorder = window.__gkeresumeRecorder;
    recorder.observer.disconnect();
    return recorder.notes;
  });
}

/** Photograph the status bar while an operation shows a partly filled bar (states given). */
async function shotInFlight(page, states, name) {
  try {
    await page.waitForFunction(
      states => {
        const item = document.querySelector('.jp-gkeresume-status');
        const bar = document.querySelector('.jp-gkeresume-progress');
        return (
          states.includes(item?.dataset.state) && bar && !bar.hidden && bar.value > 0 && bar.value < 1
        );
      },
      states,
      { timeout: WAIT, polling: 'raf' }
    );
    await shot(page, name);
    seen[`${name}-label`] = await page.locator('.jp-gkeresume-label').innerText();
  } catch (error) {
    seen[`${name}-missed`] = String(error);
  }
}

async function dismiss(page, bodyClass) {
  const dialog = page.locator('.jp-Dialog', { has: page.locator(bodyClass) });
  await dialog.waitFor({ timeout: WAIT });
  const text = await dialog.locator(bodyClass).innerText();
  await dialog.getByRole('button', { name: 'OK', exact: true }).click();
  await dialog.waitFor({ state: 'detached', timeout: WAIT });
  return text;
}

async function main() {
  mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await launchChromium(CHROMIUM);
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on('pageerror', error => console.error(`[page error] ${error.message}`));
  try {
    const url = `${LAB_URL}lab/tree/${NOTEBOOK}?token=${LAB_TOKEN}`;
    step('open the notebook');
    await page.goto(url);
    await page.locator('.jp-gkeresume-status[data-state="running"]').waitFor({ timeout: WAIT });
    await kernelIdle(page, WAIT);

    step('pause while a cell runs: the pause queues behind the cell, and Cancel withdraws it');
    await runCode(page, "__import__('time').sleep(600)");
    await page.waitForFunction(
      () => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'busy',
      null,
      { timeout: WAIT }
    );
    await page.locator('.jp-gkeresume-pause-button').first().click();
    await page.waitForFunction(
      () => (document.querySelector('.jp-gkeresume-label')?.textContent ?? '').startsWith('Pause queued'),
      null,
      { timeout: WAIT }
    );
    seen.queuedLabel = await page.locator('.jp-gkeresume-label').innerText();
    await shot(page, 'pause-queued');
    await page.locator('.jp-gkeresume-cancel').first().click();
    const cancelled = page.locator('.jp-Dialog', { hasText: 'Pause cancelled' });
    await cancelled.waitFor({ timeout: WAIT });
    seen.cancelMessage = await cancelled.locator('.jp-Dialog-body').innerText();
    await cancelled.locator('.jp-Dialog-button').first().click();
    await cancelled.waitFor({ state: 'detached', timeout: WAIT });
    seen.labelAfterCancel = await page.locator('.jp-gkeresume-label').innerText();
    seen.kernelAfterCancel = await page.evaluate(
      () => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status
    );
    await page.evaluate(() => window.jupyterapp.commands.execute('notebook:interrupt-kernel'));
    await kernelIdle(page, WAIT);
    await page.evaluate(() =>
      window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')
    );

    step('run x = 41 + 1');
    await executed(await runCode(page, 'x = 41 + 1'));
    await kernelIdle(page, WAIT);

    step('GPU menu, then Checkpoint This Notebook: the kernel keeps running');
    await page.locator('.lm-MenuBar-itemLabel', { hasText: /^GPU$/ }).click();
    const menu = page.locator('.lm-Menu').last();
    await menu.waitFor({ timeout: WAIT });
    seen.menu = await menu.locator('.lm-Menu-itemLabel').allInnerTexts();
    await menu.locator('.lm-Menu-itemLabel', { hasText: 'Checkpoint This Notebook' }).click();
    seen.checkpointMessage = await dismiss(page, '.jp-gkeresume-message');
    await statusState(page, 'running');
    await kernelIdle(page, WAIT);

    step('make a session of 512 MiB: one 256 MiB array and eight of 32 MiB');
    await executed(
      await runCode(
        page,
        'import numpy as np; big = np.arange(32 * 2**20, dtype=np.float64); ' +
          'parts = [np.arange(4 * 2**20, dtype=np.float64) + i for i in range(8)]'
      )
    );
    await kernelIdle(page, WAIT);

    step('click Pause');
    await startRecorder(page);
    await page.locator('.jp-gkeresume-pause-button').first().click();
    await shotInFlight(page, ['pausing', 'releasing'], 'progress-pausing');
    await statusState(page, 'paused');
    await page.locator('.jp-Dialog .jp-gkeresume-message').waitFor({ timeout: WAIT });
    seen.pauseNotes = await stopRecorder(page);
    seen.pausedLabel = await page.locator('.jp-gkeresume-label').innerText();
    seen.cancelAfterPause = await page.locator('.jp-gkeresume-cancel').isVisible();
    seen.badge = await page.locator('.jp-gkeresume-badge').first().innerText();
    step('status reached paused');
    // Pause saved the notebook first: the file on the server has the cell just run.
    seen.savedCells = await page.evaluate(
      async ({ url, token, path }) => {
        const reply = await fetch(`${url}api/contents/${path}?content=1&token=${token}`);
        const cells = (await reply.json()).content.cells;
        return cells.map(cell => [cell.source].flat().join(''));
      },
      { url: LAB_URL, token: LAB_TOKEN, path: NOTEBOOK }
    );
    seen.pauseMessage = await page
      .locator('.jp-Dialog .jp-gkeresume-message')
      .innerText({ timeout: WAIT });
    await shot(page, 'paused-status');
    await dismiss(page, '.jp-gkeresume-message');
    await shot(page, 'paused-status-bar');

    step('reload');
    await page.reload();
    const dialog = page.locator('.jp-Dialog', { has: page.locator('.jp-gkeresume-resume-dialog') });
    await dialog.waitFor({ timeout: WAIT });
    step('resume dialog shown');
    seen.resumeDialog = await dialog.locator('.jp-gkeresume-resume-dialog').innerText();
    seen.resumeButtons = await dialog.locator('.jp-Dialog-button').allInnerTexts();
    await shot(page, 'resume-dialog');
    await kernelIdle(page, WAIT);

    step('click Resume');
    await startRecorder(page);
    await dialog.getByRole('button', { name: 'Resume', exact: true }).click();
    await shotInFlight(page, ['waiting_for_resources', 'restoring'], 'progress-resuming');
    // The message is the end; "ready" reads "Running" once the resume is a while ago, so what
    // the status bar said when it got there is taken from the notes, not read later.
    await page.locator('.jp-Dialog .jp-gkeresume-message').waitFor({ timeout: WAIT });
    step('resume message shown');
    seen.resumeNotes = await stopRecorder(page);
    seen.readyLabel = seen.resumeNotes.find(note => note.state === 'ready')?.label ?? null;
    seen.cancelAfterResume = await page.locator('.jp-gkeresume-cancel').isVisible();
    await shot(page, 'resume-message');
    seen.resumeMessage = await dismiss(page, '.jp-gkeresume-message');
    seen.badgeAfterResume = await page.locator('.jp-gkeresume-badge').first().isVisible();
    await kernelIdle(page, WAIT);

    step('run print(x, big.nbytes + sum(p.nbytes for p in parts), parts[7][1])');
    const last = await runCode(page, 'print(x, big.nbytes + sum(p.nbytes for p in parts), parts[7][1])');
    const output = last.locator('.jp-OutputArea-output');
    await output.waitFor({ timeout: WAIT });
    seen.output = (await output.innerText()).trim();
    await shot(page, 'after-resume');

    step('dark theme: Snapshots panel');
    await page.evaluate(() =>
      window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' })
    );
    await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, {
      timeout: WAIT
    });
    await page.evaluate(() => window.jupyterapp.commands.execute('gkeresume:snapshots'));
    await page.locator('.jp-gkeresume-snapshot').first().waitFor({ timeout: WAIT });
    seen.snapshots = await page.locator('.jp-gkeresume-snapshot').count();
    seen.darkPanel = await page.evaluate(() => {
      const style = getComputedStyle(document.querySelector('.jp-gkeresume-panel'));
      return { color: style.color, background: style.backgroundColor };
    });
    seen.darkStatus = await page.evaluate(() => {
      const style = getComputedStyle(document.querySelector('.jp-gkeresume-label'));
      return { color: style.color };
    });
    await shot(page, 'dark-snapshots');

    step('Snapshots panel: Restore brings x back after it changed');
    await executed(await runCode(page, 'x = 0'));
    await kernelIdle(page, WAIT);
    const item = page.locator('.jp-gkeresume-snapshot').first();
    await item.getByRole('button', { name: /^Restore snapshot / }).click();
    seen.restoreMessage = await dismiss(page, '.jp-gkeresume-message');
    await kernelIdle(page, WAIT);
    const again = await runCode(page, 'print(x)');
    await again.locator('.jp-OutputArea-output').waitFor({ timeout: WAIT });
    seen.outputAfterRestore = (await again.locator('.jp-OutputArea-output').innerText()).trim();

    step('Snapshots panel: Delete asks first, then the snapshot is gone');
    seen.snapshotsBeforeDelete = await page.locator('.jp-gkeresume-snapshot').count();
    const deleted = await item.getAttribute('data-id');
    await item.getByRole('button', { name: /^Delete snapshot / }).click();
    const confirm = page.locator('.jp-Dialog', { hasText: 'Delete snapshot' });
    await confirm.waitFor({ timeout: WAIT });
    seen.deleteQuestion = await confirm.locator('.jp-Dialog-body').innerText();
    await confirm.getByRole('button', { name: 'Delete', exact: true }).click();
    await page
      .locator(`.jp-gkeresume-snapshot[data-id="${deleted}"]`)
      .waitFor({ state: 'detached', timeout: WAIT });
    seen.deleted = deleted;
    seen.snapshotsAfterDelete = await page.locator('.jp-gkeresume-snapshot').count();
    step('done');
    console.log(JSON.stringify(seen));
  } catch (error) {
    await shot(page, 'failure').catch(() => undefined);
    console.log(JSON.stringify({ ...seen, error: String(error) }));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

await main();
