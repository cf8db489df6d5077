// Opens a merged hetsync timeline (Chrome trace events) in the Performance panel of the
// DevTools that Chromium serves on its debugging port, expands the ranks' tracks and saves a
// screenshot. Run by scripts/timeline-screenshot.sh, which says what it needs.
//
//   node timeline-screenshot.js CHROMIUM TRACE.json OUT.png RANKS
const fs = require('fs');
const puppeteer = require('puppeteer-core');

const [chromium, trace, out, ranksArg] = process.argv.slice(2);
const ranks = Number(ranksArg);
const port = 9300 + (process.pid % 500);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// deep finds the first element whose aria-label starts with label, through shadow roots
// (DevTools is made of web components).
function deep(page, label) {
  return page.evaluateHandle((label) => {
    const walk = (root) => {
      for (const e of root.querySelectorAll('*')) {
        const l = e.getAttribute('aria-label');
        if (l && l.startsWith(label)) return e;
        if (e.shadowRoot) {
          const f = walk(e.shadowRoot);
          if (f) return f;
        }
      }
      return null;
    };
    return walk(document);
  }, label);
}

// click clicks the element labelled label with the mouse (a file chooser opens only on a
// user's gesture); a tab is selected on mousedown.
async function click(page, label, tab) {
  const el = (await deep(page, label)).asElement();
  if (!el) throw new Error(`no element labelled "${label}" in DevTools`);
  if (tab) await el.evaluate((e) => e.dispatchEvent(new MouseEvent('mousedown', { bubbles: true })));
  await el.click();
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', `--remote-debugging-port=${port}`],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1600, height: 900 });
    await page.goto(`http://127.0.0.1:${port}/devtools/trace_app.html`, { waitUntil: 'load', timeout: 60000 });
    await sleep(3000);
    await page.keyboard.press('Escape'); // the "debugging connection closed" notice: no page is inspected
    await click(page, 'Performance', true);
    await sleep(1000);
    const [chooser] = await Promise.all([page.waitForFileChooser({ timeout: 30000 }), click(page, 'Load trace')]);
    await chooser.accept([trace]);
    await sleep(8000);
    const hide = (await deep(page, 'Hide sidebar')).asElement();
    if (hide) {
      const b = await hide.boundingBox();
      await page.mouse.click(b.x + b.width / 2, b.y + b.height / 2);
      await sleep(1000);
    }
    // Show the rounds: a drag across the overview, from just before the first round (joining
    // and loading the data set come before it) to the end, selects that window.
    const events = JSON.parse(fs.readFileSync(trace, 'utf8')).filter((e) => e.ph === 'X');
    const t0 = Math.min(...events.map((e) => e.ts));
    const t1 = Math.max(...events.map((e) => e.ts + e.dur));
    const rounds = events.filter((e) => e.name === 'round').map((e) => e.ts);
    if (rounds.length > 0) {
      const from = Math.min(...rounds) - 0.04 * (t1 - Math.min(...rounds));
      const grid = await (await deep(page, 'Overview grid window')).asElement().boundingBox();
      const x = (t) => grid.x + (grid.width * (t - t0)) / (t1 - t0);
      const y = grid.y + grid.height * 0.75;
      await page.mouse.move(x(from), y);
      await page.mouse.down();
      await page.mouse.move(x(t1) - 2, y, { steps: 10 });
      await page.mouse.up();
      await sleep(1000);
    }
    // The ranks' tracks are rows of the flame chart canvas, 21 px apart below the time ruler;
    // expanding the last first leaves the rows above where they were.
    const canvas = (await deep(page, 'Flame chart')).asElement();
    const box = await canvas.boundingBox();
    for (let r = ranks - 1; r >= 0; r--) {
      await page.mouse.click(box.x + 40, box.y + 28 + 21 * r);
      await sleep(300);
    }
    await sleep(1000);
    await page.screenshot({ path: out });
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(`timeline-screenshot: ${e.message}`);
  process.exit(1);
});
