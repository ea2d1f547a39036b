/**
 * Issue 27.9 and 27.6 in a real browser: a person using a JupyterLab tab (keys, pointer,
 * wheel, as Chromium's input pipeline delivers them: trusted events) keeps the workspace from
 * its idle pause; once nobody touches it, it pauses and the tab says why. Run by
 * tests/test_ui_idle.py, which starts JupyterLab with a short idle timeout and passes:
 *   LAB_URL, LAB_TOKEN, NOTEBOOK, CHROMIUM, ARTIFACTS (folder for screenshots), INPUT_SECONDS.
 * First a pause (the toolbar button) and a resume (the resume dialog) whose "Workspace
 * resumed" message is left open, as a person who walked away would. Prints `open` then, `input
 * N` after each round of input (one a second for INPUT_SECONDS), then `stopped`; then waits for
 * the idle pause's message and prints one JSON line: {"resumed": text of the message left open,
 * "message": the idle pause's, "dialogs": the titles of every dialog on screen then} (its
 * screenshot: idle-pause.png). Exits 1 on any failure.
 */

import { join } from 'node:path';
import { kernelIdle, launchChromium } from './browser.mjs';

const { LAB_URL, LAB_TOKEN, NOTEBOOK, CHROMIUM, ARTIFACTS, INPUT_SECONDS } = process.env;
const WAIT = 120_000; // a safety net against hangs, not a speed requirement

async function main() {
  const browser = await launchChromium(CHROMIUM);
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.on('console', m => ['warning', 'error'].includes(m.type()) && console.error(m.text()));
    await page.goto(`${LAB_URL}lab/tree/${NOTEBOOK}?token=${LAB_TOKEN}`);
    await kernelIdle(page, WAIT);
    // a variable, so that the message has something to name
    await page.evaluate(async () => {
      const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
      await kernel.requestExecute({ code: 'answer = 41 + 1' }).done;
    });
    const message = page.locator('.jp-Dialog', { has: page.locator('.jp-gkeresume-message') });
    await page.locator('.jp-gkeresume-pause-button').first().click();
    await message.waitFor({ timeout: WAIT });
    await message.getByRole('button', { name: 'OK' }).click();
    await message.waitFor({ state: 'detached', timeout: WAIT });
    await page.evaluate(() => void window.jupyterapp.commands.execute('gkeresume:resume'));
    const offer = page.locator('.jp-Dialog', { has: page.locator('.jp-gkeresume-resume-dialog') });
    await offer.getByRole('button', { name: 'Resume', exact: true }).click({ timeout: WAIT });
    const resumed = page.locator('.jp-Dialog', { hasText: 'Workspace resumed' });
    await resumed.waitFor({ timeout: WAIT });
    const seen = { resumed: await resumed.innerText() }; // left open: nobody clicks OK
    console.log('open');
    const rounds = Number(INPUT_SECONDS);
    for (let round = 1; round <= rounds; round++) {
      // what a person reading does: the pointer moves, the page scrolls, a key is pressed
      await page.mouse.move(300 + (round % 7) * 40, 300 + (round % 5) * 30);
      await page.mouse.wheel(0, round % 2 ? 120 : -120);
      await page.keyboard.press('Shift');
      console.log(`input ${round}`);
      await page.waitForTimeout(1000);
    }
    console.log('stopped');
    const idle = page.locator('.jp-Dialog', { hasText: 'nobody was active' });
    await idle.waitFor({ timeout: WAIT * 2 });
    seen.message = await idle.innerText();
    seen.dialogs = await page.locator('.jp-Dialog .jp-Dialog-header').allInnerTexts();
    await page.screenshot({ path: join(ARTIFACTS, 'idle-pause.png') });
    console.log(JSON.stringify(seen));
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
