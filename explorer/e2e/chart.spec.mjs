// End-to-end test of the explorer, run by scripts/e2e-browser.sh with plain `node` (no test runner).
// Drives Debian's Chromium through playwright-core; never downloads a browser.
//
// Checks that
//  - the page loads the listed bundle and shows its provenance (and the synthetic-weights badge);
//  - for EVERY (B, N) group the chart's data-series equals the medians this test computes itself from
//    the bundle file (LLaDA per K, AR reference), and the canvas has the lines' pixels;
//  - broken bundles (not JSON, newer version, missing field, 404, local file) give a clear message in
//    [data-testid=error] and the app keeps working afterwards;
//  - strings from a bundle are shown as text, never as HTML;
//  - no uncaught page error happened.
import { createRequire } from 'node:module';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set (run scripts/e2e-browser.sh)`);
  return v;
};
const BASE = env('E2E_BASE_URL');
// [{file, path}]: the bundles listed in the index, in order, and where the test reads them from.
const BUNDLES = JSON.parse(readFileSync(env('E2E_BUNDLES_JSON'), 'utf8'));
const DPR = Number(process.env.E2E_DPR || '1'); // devicePixelRatio: the canvas draws at device resolution
const SCREENSHOT = DPR === 1 ? env('E2E_SCREENSHOT') : env('E2E_SCREENSHOT').replace(/\.png$/, `-dpr${DPR}.png`);
const require = createRequire(join(env('E2E_NODE_MODULES'), 'noop.js'));
const { chromium } = require('playwright-core');

const CHART = '[data-testid="chart-latency-steps"]';
const DRAWN = `${CHART}[data-drawn="true"]`;
const TIMEOUT = 30_000;

// ---- expected values, computed here from the bundle file (independently of the Rust code) ----------
function median(xs) {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
function expectedGroups(bundle) {
  const groups = new Map(); // "B,N" -> { diffusion: [[steps, median]], ar: median|null }
  const ok = bundle.cells.filter((c) => c.status.state === 'ok' && c.repetitions.length > 0);
  for (const c of ok) {
    if (c.key.steps == null) continue;
    const id = `${c.key.batch_size},${c.key.seq_len}`;
    if (!groups.has(id)) groups.set(id, { diffusion: [], ar: null });
    groups.get(id).diffusion.push([c.key.steps, median(c.repetitions.map((r) => r.e2e_ms))]);
  }
  for (const c of ok) {
    const g = groups.get(`${c.key.batch_size},${c.key.seq_len}`);
    if (c.key.sampler === 'ar_greedy' && g && g.ar === null) g.ar = median(c.repetitions.map((r) => r.e2e_ms));
  }
  return groups;
}
const close = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));
const sortPts = (pts) => [...pts].sort((p, q) => p[0] - q[0] || p[1] - q[1]);

const checks = [];
function pass(msg) {
  checks.push(msg);
  console.log(`  ok  ${msg}`);
}

/** Checks the shown bundle `file` (already selected) against the bundle file at `path`. */
async function checkBundle(page, { file, path }) {
  const bundle = JSON.parse(readFileSync(path, 'utf8'));
  const expected = expectedGroups(bundle);
  assert.ok(expected.size > 0, `${path} has no successful diffusion cells`);
  await page.waitForFunction(
    ([sel, f]) => document.querySelector(sel)?.dataset.drawn === 'true' &&
      document.querySelector('[data-testid="provenance"] .source')?.textContent === f,
    [CHART, file], { timeout: TIMEOUT });
  pass(`${file}: chart drew (data-drawn=true)`);
  const prov = await page.textContent('[data-testid="provenance"]');
  const p = bundle.provenance;
  for (const s of [p.tool_version, p.created_at, p.config_source, p.git_commit, p.host, p.device.name,
    p.device.cuda_version].filter(Boolean)) {
    assert.ok(prov.includes(s), `${file}: provenance does not show ${JSON.stringify(s)}`);
  }
  pass(`${file}: provenance shows tool version, commit, created, host, device, CUDA, config source`);
  const badge = await page.$('[data-testid="synthetic-badge"]');
  assert.equal(Boolean(badge), Boolean(p.synthetic_weights), 'synthetic-weights badge presence');
  if (badge) assert.match(await badge.textContent(), /SYNTHETIC WEIGHTS: timing is real, quality is meaningless/);
  pass(`${file}: synthetic-weights badge ${p.synthetic_weights ? 'shown' : 'absent'} as the bundle says`);

  // Every (B, N) group: plotted numbers equal the bundle's, pixels are drawn.
  const groupValues = await page.$$eval('[data-testid="group-select"] option', (os) => os.map((o) => o.value));
  assert.equal(groupValues.length, expected.size, 'number of (B, N) groups');
  for (const v of groupValues) {
    await page.selectOption('[data-testid="group-select"]', v);
    await page.waitForFunction(
      ([sel, want]) => {
        const el = document.querySelector(sel);
        if (!el || el.dataset.drawn !== 'true' || !el.dataset.series) return false;
        const s = JSON.parse(el.dataset.series);
        return `B=${s.batch_size}, N=${s.seq_len}` ===
          document.querySelector(`[data-testid="group-select"] option[value="${want}"]`).textContent;
      },
      [CHART, v], { timeout: TIMEOUT });
    const series = JSON.parse(await page.getAttribute(CHART, 'data-series'));
    const id = `B=${series.batch_size} N=${series.seq_len}`;
    const want = expected.get(`${series.batch_size},${series.seq_len}`);
    assert.ok(want, `chart shows a group ${id} the bundle does not have`);
    const got = series.lines.flatMap((l) => l.points.map((q) => [q.steps, q.median_ms]));
    const [g, w] = [sortPts(got), sortPts(want.diffusion)];
    assert.equal(g.length, w.length, `${id}: number of diffusion points`);
    g.forEach((q, i) => {
      assert.equal(q[0], w[i][0], `${id}: steps`);
      assert.ok(close(q[1], w[i][1]), `${id} K=${q[0]}: plotted median ${q[1]} != bundle median ${w[i][1]}`);
    });
    if (want.ar === null) assert.equal(series.ar, null, `${id}: AR reference without AR cell`);
    else assert.ok(series.ar && close(series.ar.median_ms, want.ar), `${id}: AR median ${series.ar?.median_ms} != ${want.ar}`);

    const px = await page.$eval(CHART, (c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let ink = 0, blue = 0, black = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, gg, b] = [d[i], d[i + 1], d[i + 2]];
        if (r < 240 || gg < 240 || b < 240) ink++;
        if (Math.abs(r - 0x00) < 40 && Math.abs(gg - 0x72) < 40 && Math.abs(b - 0xb2) < 40) blue++;
        if (r < 40 && gg < 40 && b < 40) black++;
      }
      return { ink, blue, black, total: d.length / 4 };
    });
    assert.ok(px.ink > px.total * 0.01, `${id}: canvas is (almost) blank: ${JSON.stringify(px)}`);
    assert.ok(px.blue > 150, `${id}: no LLaDA line pixels (Okabe-Ito blue): ${JSON.stringify(px)}`);
    // Each marker's centre (as the app reports it in data-markers) is painted in the line's colour.
    const markers = JSON.parse(await page.getAttribute(CHART, 'data-markers'));
    assert.equal(markers.length, g.length, `${id}: number of markers`);
    const scale = await page.$eval(CHART, (c) => c.width / c.clientWidth);
    assert.ok(Math.abs(scale - DPR) < 0.01, `${id}: canvas is ${scale}x its CSS size, devicePixelRatio is ${DPR}`);
    const offMarker = await page.$eval(CHART, (c, ms) => {
      const ctx = c.getContext('2d');
      return ms.filter((m) => {
        const [r, gg, b] = ctx.getImageData(m.x, m.y, 1, 1).data;
        return !(Math.abs(r - 0x00) < 40 && Math.abs(gg - 0x72) < 40 && Math.abs(b - 0xb2) < 40);
      });
    }, markers);
    assert.deepEqual(offMarker, [], `${id}: markers whose centre is not painted`);
    pass(`${file} ${id}: ${g.length} LLaDA medians${want.ar === null ? '' : ' + AR reference'} match the bundle; ` +
      `${px.ink} ink px, ${px.blue} line px`);
  }
  await page.selectOption('[data-testid="group-select"]', groupValues[0]);
  await page.waitForSelector(DRAWN, { timeout: TIMEOUT });

  // Hovering a marker shows its numbers.
  const markers = JSON.parse(await page.getAttribute(CHART, 'data-markers'));
  const m = markers[Math.floor(markers.length / 2)];
  const box = await page.$eval(CHART, (c) => ({ scale: c.width / c.clientWidth }));
  await page.hover(CHART, { position: { x: m.x / box.scale, y: m.y / box.scale } });
  const tip = await page.waitForSelector('[data-testid="chart-tooltip"]', { timeout: TIMEOUT });
  const tipText = await tip.textContent();
  assert.ok(tipText.includes(`K = ${m.steps}: median ${m.median_ms.toFixed(1)} ms`), `tooltip: ${tipText}`);
  if (file === BUNDLES[0].file) {
    await page.screenshot({ path: SCREENSHOT.replace(/\.png$/, '-tooltip.png'), clip: await (await page.$('.chart-frame')).boundingBox() });
  }
  await page.mouse.move(0, 0);
  await page.waitForSelector('[data-testid="chart-tooltip"]', { state: 'detached', timeout: TIMEOUT });
  pass(`${file}: hovering K=${m.steps} shows "${tipText.split('\n')[1]}"`);
}

// A fresh temporary profile: launchPersistentContext instead of launch() so the path is ours to remove.
const profile = mkdtempSync(join(tmpdir(), 'dllm-e2e-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1000, height: 1100 },
  deviceScaleFactor: DPR,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => m.type() === 'error' && console.log(`  [console.error] ${m.text()}`));
  // Nothing but our server may be contacted.
  await page.route('**/*', (route) =>
    route.request().url().startsWith(BASE) ? route.continue() : route.abort());

  // ---- every listed bundle: provenance, and the plotted numbers against the bundle's ---------------------
  await page.goto(BASE);
  await page.waitForFunction(
    (files) => files.every((f) => document.querySelector(`[data-testid="bundle-select"] option[value="${f}"]`)),
    BUNDLES.map((b) => b.file), { timeout: TIMEOUT });
  pass(`the bundle selector lists ${BUNDLES.map((b) => b.file).join(', ')} from bundles/index.json`);
  const first = await page.$eval('[data-testid="bundle-select"] option:not([disabled])', (o) => o.value);
  await page.waitForFunction(
    ([sel, f]) => document.querySelector(sel)?.dataset.drawn === 'true' &&
      document.querySelector('[data-testid="provenance"] .source')?.textContent === f,
    [CHART, first], { timeout: TIMEOUT });
  pass(`the index's first bundle (${first}) loads and draws without a click`);
  for (const b of BUNDLES) {
    await page.selectOption('[data-testid="bundle-select"]', b.file);
    await checkBundle(page, b);
  }
  assert.ok(page.url().includes(`?bundle=${BUNDLES.at(-1).file}`), `the address does not name the bundle: ${page.url()}`);
  await page.selectOption('[data-testid="bundle-select"]', BUNDLES[0].file);
  await page.waitForSelector(DRAWN, { timeout: TIMEOUT });
  await page.screenshot({ path: SCREENSHOT, fullPage: true });
  pass(`screenshot saved to ${SCREENSHOT}`);

  // ---- broken bundles give clear messages, and the app keeps working ------------------------------------
  const cases = [
    ['broken-not-json.json', /not a valid JSON file/],
    ['broken-future-version.json', /schema version 9\.0.*upgrade/],
    ['broken-missing-field.json', /field `cells\[0\]\.key.*batch_size/],
    ['does-not-exist.json', /could not fetch .*does-not-exist\.json.*404/],
  ];
  for (const [file, re] of cases) {
    await page.goto(`${BASE}?bundle=${file}`);
    const err = await page.waitForSelector('[data-testid="error"]', { timeout: TIMEOUT });
    const text = await err.textContent();
    assert.match(text, re, `${file}: message`);
    assert.equal(await page.$(CHART), null, `${file}: a chart is still shown`);
    pass(`${file}: "${text.slice(0, 90)}${text.length > 90 ? '…' : ''}"`);
  }
  await page.screenshot({ path: SCREENSHOT.replace(/\.png$/, '') + '-error.png', fullPage: true });
  // Recover by picking the good bundle from the list.
  await page.selectOption('[data-testid="bundle-select"]', BUNDLES[0].file);
  await page.waitForSelector(DRAWN, { timeout: TIMEOUT });
  assert.equal(await page.$('[data-testid="error"]'), null, 'the error stays after a good bundle loaded');
  pass('after an error, picking a bundle from the list draws the chart again');

  // ---- local files through the file picker; bundle strings are text, not HTML --------------------------
  const input = '[data-testid="file-input"]';
  await page.setInputFiles(input, { name: 'mine.json', mimeType: 'application/json', buffer: Buffer.from('[1, 2') });
  await page.waitForSelector('[data-testid="error"]', { timeout: TIMEOUT });
  assert.match(await page.textContent('[data-testid="error"]'), /mine\.json.*not a valid JSON/);
  pass('a broken local file gives an error message');
  const evil = JSON.parse(readFileSync(BUNDLES[0].path, 'utf8'));
  evil.provenance.host = '<img id="xss" src="x" onerror="window.__xss=1">';
  await page.setInputFiles(input, { name: 'evil.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(evil)) });
  await page.waitForSelector(DRAWN, { timeout: TIMEOUT });
  assert.equal(await page.$('#xss'), null, 'a bundle string was rendered as HTML');
  assert.ok((await page.textContent('[data-testid="provenance"]')).includes(evil.provenance.host));
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  pass('a local bundle loads; its strings are shown as text, not HTML');

  assert.deepEqual(pageErrors, [], 'uncaught errors in the page');
  pass('no uncaught page errors');
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e.stack || e}`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(failed ? `e2e (devicePixelRatio ${DPR}): FAILED` : `e2e (devicePixelRatio ${DPR}): all ${checks.length} checks passed`);
process.exit(failed ? 1 : 0);
