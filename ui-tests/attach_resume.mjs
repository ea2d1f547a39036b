/**
 * Issue 27.3 in a real browser: after reload + Resume, a cell typed and run at once in each of
 * two open notebooks sees the restored state (one kernel per notebook). Run by
 * tests/test_ui_attach.py, which starts JupyterLab (release backend `none`) with a.ipynb and
 * b.ipynb and passes: LAB_URL, LAB_TOKEN, CHROMIUM, BIG_MB (size of a.ipynb's array), MODE, FLAG:
 *   `held`:    the lab's session requests (POST /api/sessions) are held in the browser
 *              (playwright `page.route`) from the reload until the resume is mid-flight: a.ipynb's
 *              restore is held inside its kernel (an object whose unpickling waits for the file
 *              FLAG); then they go on; `print(x)` is typed and run in a.ipynb while its restore
 *              is still held, and FLAG is written only then.
 *   `stay`:    no reload: the pause stopped the kernels under the open tabs (as the idle pause
 *              and `%pause` do); Resume from the command; each tab is connected to its
 *              notebook's restored kernel (labextension/src/attach.ts), no "Select Kernel".
 *   `natural`: nothing is held: the lab starts its sessions as it does, Resume is clicked as soon
 *              as the dialog shows, and `print(x)` is typed and run in a.ipynb once the resume's
 *              message (a modal dialog, which would take typed keys) is dismissed.
 * Then b.ipynb's `print(y)`. Prints one JSON line (`outputs`, `sessions` as the server lists
 * them, the resume message); exits 1 on any failure.
 */

import { writeFileSync, unlinkSync, existsSync } from 'node:fs';
import { launchChromium } from './browser.mjs';

const { LAB_URL, LAB_TOKEN, CHROMIUM, MODE, FLAG } = process.env;
const BIG_MB = Number(process.env.BIG_MB || '16');
const WAIT = Number(process.env.WAIT_MS || 240_000); // a safety net against hangs, not a speed requirement
const seen = { mode: MODE, steps: [] };

function step(name) {
  seen.steps.push(name);
  console.error(`[attach] ${name}`);
}

const api = (page, path) =>
  page.evaluate(
    async ({ url, token, path }) => (await fetch(`${url}${path}?token=${token}`)).json(),
    { url: LAB_URL, token: LAB_TOKEN, path }
  );

async function until(what, predicate) {
  const deadline = Date.now() + WAIT;
  while (Date.now() < deadline) {
    if (await predicate()) {
      return;
    }
    await new Promise(resolve => setTimeout(resolve, 100));
  }
  throw new Error(`never ${what}`);
}

/** Show `path`'s tab (opened if need be) and wait until its kernel is connected (and idle,
 * unless `idle` is false). The tab is found by its path, not as the shell's current widget,
 * which a modal dialog keeps from changing. */
async function show(page, path, idle = true) {
  await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('docmanager:open'), null, {
    timeout: WAIT
  });
  await page.evaluate(p => {
    // not awaited: the command's promise waits for the document's context
    void window.jupyterapp.commands.execute('docmanager:open', { path: p });
  }, path);
  await page.waitForFunction(
    ({ p, idle }) => {
      const app = window.jupyterapp;
      const widget = [...app.shell.widgets('main')].find(w => w.context?.path === p);
      if (!widget) {
        return false;
      }
      app.shell.activateById(widget.id);
      const kernel = widget.sessionContext?.session?.kernel;
      return kernel?.connectionStatus === 'connected' && (!idle || kernel.status === 'idle');
    },
    { p: path, idle },
    { timeout: WAIT, polling: 100 }
  );
}

const cells = page => page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell');

/** Type `code` into the current notebook's last cell and run it; returns that cell. */
async function typeAndRun(page, code) {
  const all = cells(page);
  const cell = all.nth((await all.count()) - 1);
  await cell.locator('.cm-content').click();
  await page.keyboard.type(code);
  await page.keyboard.press('Shift+Enter');
  return cell;
}

/** Put `code` in the current notebook's last cell and run it with the notebook's command (a new
 * empty cell follows, as Shift+Enter leaves one). */
async function runCommand(page, code) {
  const all = cells(page);
  const cell = all.nth((await all.count()) - 1);
  await page.evaluate(code => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = notebook.widgets.length - 1;
    notebook.activeCell.model.sharedModel.setSource(code);
    return window.jupyterapp.commands.execute('notebook:run-cell-and-insert-below');
  }, code);
  return cell;
}

async function output(cell) {
  const out = cell.locator('.jp-OutputArea-output');
  await out.first().waitFor({ timeout: WAIT });
  return (await out.allInnerTexts()).join('\n').trim();
}

async function dismissMessage(page) {
  const dialog = page.locator('.jp-Dialog', { has: page.locator('.jp-gkeresume-message') });
  await dialog.waitFor({ timeout: WAIT });
  const text = await dialog.locator('.jp-gkeresume-message').innerText();
  await dialog.getByRole('button', { name: 'OK', exact: true }).click();
  await dialog.waitFor({ state: 'detached', timeout: WAIT });
  return text;
}

async function main() {
  const browser = await launchChromium(CHROMIUM);
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on('pageerror', error => console.error(`[page error] ${error.message}`));
  try {
    step('open a.ipynb and b.ipynb, make their state');
    await page.goto(`${LAB_URL}lab/tree/a.ipynb?token=${LAB_TOKEN}`);
    await show(page, 'a.ipynb');
    const gate =
      MODE === 'held'
        ? `import os, time\nclass Gate:\n    def __init__(self, flag): self.flag = flag\n` +
          `    def __setstate__(self, state):\n        self.__dict__.update(state)\n` +
          `        while not os.path.exists(self.flag): time.sleep(0.05)\n` +
          `gate = Gate(${JSON.stringify(FLAG)})\n`
        : '';
    writeFileSync(FLAG, ''); // the pause itself must not wait at the gate
    await output(
      await runCommand(
        page,
        `${gate}import numpy as np\nbig = np.ones(${BIG_MB} * 2**20 // 8)\nx = 'restored-a'\n` +
          `print(big.nbytes // 2**20, 'MiB')`
      )
    );
    await show(page, 'b.ipynb');
    await output(await runCommand(page, "y = 'restored-b'\nprint(y)"));

    step('Pause');
    await page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-gkeresume-pause-button').click();
    await page.locator('.jp-gkeresume-status[data-state="paused"]').waitFor({ timeout: WAIT });
    await dismissMessage(page);
    unlinkSync(FLAG);

    const held = [];
    let holding = MODE === 'held';
    if (holding) {
      await page.route(
        url => new URL(url).pathname.endsWith('/api/sessions'),
        route => {
          if (holding && route.request().method() === 'POST') {
            held.push(route);
          } else {
            void route.continue();
          }
        }
      );
    }

    if (MODE === 'stay') {
      step('no reload: the tabs stay open without kernels; Resume… from the command; Resume');
      await page.evaluate(() => {
        void window.jupyterapp.commands.execute('gkeresume:resume'); // it ends with the dialog
      });
    } else {
      step('reload; the resume dialog; Resume');
      await page.reload();
    }
    const dialog = page.locator('.jp-Dialog', { has: page.locator('.jp-gkeresume-resume-dialog') });
    await dialog.waitFor({ timeout: WAIT });
    await dialog.getByRole('button', { name: 'Resume', exact: true }).click();

    let cellA;
    if (holding) {
      step("a.ipynb's restore is held in its kernel: the lab's session requests go on");
      await until('restoring a.ipynb', async () =>
        (await api(page, 'gkeresume/api/status')).kernels.some(
          k => k.notebook === 'a.ipynb' && k.state === 'restoring'
        )
      );
      seen.held = held.length;
      holding = false;
      for (const route of held.splice(0)) {
        await route.continue();
      }
      await show(page, 'a.ipynb', false); // connected, while its kernel restores
      step('type and run print(x) in a.ipynb, then let the restore go on');
      cellA = await typeAndRun(page, 'print(x)');
      writeFileSync(FLAG, '');
      seen.resumeMessage = await dismissMessage(page);
    } else {
      // the resume's message is a modal dialog: keys typed before it opens would go to it
      seen.resumeMessage = await dismissMessage(page);
      await show(page, 'a.ipynb', false);
      step('type and run print(x) in a.ipynb');
      cellA = await typeAndRun(page, 'print(x)');
    }
    seen.outputs = { 'a.ipynb': await output(cellA) };

    step('b.ipynb: type and run print(y)');
    await show(page, 'b.ipynb', false);
    seen.outputs['b.ipynb'] = await output(await typeAndRun(page, 'print(y)'));
    seen.sessions = (await api(page, 'api/sessions')).map(s => [s.path, s.kernel.id]);
    seen.status = await api(page, 'gkeresume/api/status');
    step('done');
    console.log(JSON.stringify(seen));
  } catch (error) {
    if (process.env.ARTIFACTS) {
      await page.screenshot({ path: `${process.env.ARTIFACTS}/attach-${MODE}-failure-${Date.now()}.png` });
    }
    console.log(JSON.stringify({ ...seen, error: String(error) }));
    process.exitCode = 1;
  } finally {
    if (FLAG && !existsSync(FLAG)) {
      writeFileSync(FLAG, ''); // never leave a kernel waiting at the gate
    }
    await browser.close();
  }
}

await main();
