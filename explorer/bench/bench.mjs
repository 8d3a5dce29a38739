// Speed benchmark of the explorer in headless Chromium (run by scripts/bench-explorer.sh).
// Prints: time from navigation start to the first chart drawn (the app stamps `data-drawn-at` with
// performance.now() when it finishes drawing), and the time from a filter change to the redrawn chart.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BASE = process.env.BENCH_BASE_URL;
const FILE = process.env.BENCH_BUNDLE;
const RUNS = Number(process.env.BENCH_RUNS || '5');
const require = createRequire(join(process.env.BENCH_NODE_MODULES, 'noop.js'));
const { chromium } = require('playwright-core');
const CHART = '[data-testid="chart"]';
const med = (xs) => { const v = [...xs].sort((a, b) => a - b); return v[Math.floor(v.length / 2)]; };

const profile = mkdtempSync(join(tmpdir(), 'dllm-bench-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1280, height: 1000 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] ?? (await context.newPage());
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
const first = [], phases = [], redraws = {};
try {
  for (let i = 0; i < RUNS; i++) {
    await page.goto(`${BASE}?bundle=${FILE}&view=latency`);
    await page.waitForFunction((s) => document.querySelector(s)?.dataset.drawn === 'true', CHART, { timeout: 120_000 });
    first.push(Number(await page.getAttribute(CHART, 'data-drawn-at')));
    // Where the time went: the app's performance marks (first of each) and the bundle's arrival.
    phases.push(await page.evaluate((file) => {
      const at = (n) => performance.getEntriesByName(n)[0]?.startTime ?? NaN;
      const res = performance.getEntriesByType('resource').find((e) => e.name.endsWith(`bundles/${file}`));
      return { start: at('dllm:start'), wanted: at('dllm:bundle-wanted'), arrived: at('dllm:bundle-arrived'),
        received: res ? res.responseEnd : NaN, text: at('dllm:bundle-text'),
        loaded: at('dllm:bundle-loaded'), figure: at('dllm:figure'), drawn: at('dllm:drawn') };
    }, FILE));
    const cells = await page.$$eval('[data-testid="filter-K"] option', (o) => o.length);
    if (i === 0) console.log(`bench: ${FILE} loaded (${cells - 1} K values in the filter)`);
    // Filter changes on several views: K on latency, N on throughput, B on memory.
    for (const [view, filter] of [['latency', 'K'], ['throughput', 'N'], ['memory', 'B'], ['step-time', 'N']]) {
      await page.click(`[data-testid="tab-${view}"]`);
      await page.waitForFunction((s) => document.querySelector(s)?.dataset.drawn === 'true', CHART);
      const values = await page.$$eval(`[data-testid="filter-${filter}"] option`, (o) => o.map((x) => x.value));
      for (const v of values.slice(1, 4)) {
        const before = Number(await page.getAttribute(CHART, 'data-draw-count'));
        const t0 = await page.evaluate(([f, val]) => {
          const sel = document.querySelector(`[data-testid="filter-${f}"]`);
          sel.value = val;
          const t = performance.now();
          sel.dispatchEvent(new Event('change', { bubbles: true }));
          window.__t0 = t;
          return t;
        }, [filter, v]);
        await page.waitForFunction(([s, n]) => Number(document.querySelector(s)?.dataset.drawCount) > n, [CHART, before]);
        const at = Number(await page.getAttribute(CHART, 'data-drawn-at'));
        (redraws[`${view} (${filter})`] ??= []).push(at - t0);
      }
    }
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
if (errors.length) { console.error(`page errors: ${errors.join('; ')}`); process.exit(1); }
console.log(`bench: first chart drawn after page load: median ${med(first).toFixed(0)} ms ` +
  `(runs: ${first.map((x) => x.toFixed(0)).join(', ')} ms; target <= 150 ms)`);
const m = (k) => med(phases.map((p) => p[k])).toFixed(0);
const d = (a, b) => med(phases.map((p) => p[b] - p[a])).toFixed(0);
console.log(`bench: first load, medians: app started at ${m('start')} ms, asked for the bundle at ${m('wanted')} ms, ` +
  `bundle received at ${m('received')} ms, its ArrayBuffer in the app at ${m('arrived')} ms, ` +
  `its bytes in the app's memory at ${m('text')} ms; then parse + check + summaries ${d('text', 'loaded')} ms, ` +
  `figure ${d('loaded', 'figure')} ms, drawing ${d('figure', 'drawn')} ms`);
const all = Object.values(redraws).flat();
for (const [k, v] of Object.entries(redraws)) {
  console.log(`bench: redraw after a filter change, ${k}: median ${med(v).toFixed(1)} ms, max ${Math.max(...v).toFixed(1)} ms`);
}
console.log(`bench: redraw after a filter change, all views: median ${med(all).toFixed(1)} ms, max ` +
  `${Math.max(...all).toFixed(1)} ms over ${all.length} changes (target <= 50 ms)`);
