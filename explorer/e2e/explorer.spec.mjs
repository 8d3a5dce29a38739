// End-to-end test of the explorer, run by scripts/e2e-browser.sh with plain `node` (no test runner).
// Drives Debian's Chromium through playwright-core; never downloads a browser.
//
// Checks, against numbers this test computes itself from the bundle files:
//  - every listed bundle loads; latency vs steps for EVERY (B, N) has the bundle's medians and the AR line,
//    and the canvas shows the marks;
//  - every view renders from the hand-written study fixture with the right numbers (throughput, memory GB
//    and OOM, TTFT/ITL, step time, Pareto frontier, quality vs steps, S_parity panel, table of cells);
//  - the roofline (schema 1.2 fixture): intensity and achieved FLOP rate per cell, ceilings from entered peaks;
//  - small multiples: every (N, B) of latency vs steps at once, each facet with its shape's medians;
//  - hover tooltips, click-to-cell, a filter changes the chart, a deep link restores the state, compare
//    mode overlays two bundles (and states the two stacks side by side), CSV export holds the filtered cells, PNG export, drag-and-drop;
//  - the chart above the fold at 1400 x 900 (300 px) and 390 x 844; energy per token where a bundle measured it;
//  - 10+ malformed bundles each show their message, and the app keeps working;
//  - bundle strings are shown as text, never HTML; no uncaught page error.
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
// {file: expected message regexp source} of the malformed bundles served next to them.
const BROKEN = JSON.parse(readFileSync(env('E2E_BROKEN_JSON'), 'utf8'));
const DPR = Number(process.env.E2E_DPR || '1');
const SCREENSHOT = DPR === 1 ? env('E2E_SCREENSHOT') : env('E2E_SCREENSHOT').replace(/\.png$/, `-dpr${DPR}.png`);
const SHOTS = SCREENSHOT.replace(/\.png$/, '');
const require = createRequire(join(env('E2E_NODE_MODULES'), 'noop.js'));
const { chromium } = require('playwright-core');

const CHART = '[data-testid="chart"]';
const TIMEOUT = 30_000;
const STUDY = BUNDLES.find((b) => b.path.endsWith('study-h200.json'));
const STUDY_B = BUNDLES.find((b) => b.path.endsWith('study-a100.json'));
// A bundle of schema 1.2 or later, whose repetitions record the weights read and the FLOPs (the roofline).
const ROOFLINE = BUNDLES.find((b) => readFileSync(b.path, 'utf8').includes('"flop_count"'));
const NO_QUALITY = BUNDLES.find((b) => !readFileSync(b.path, 'utf8').includes('"quality"'));
// A bundle of schema 1.5 or later with LLaDA sampler series (block caches, thresholds).
const SERIES = BUNDLES.find((b) => readFileSync(b.path, 'utf8').includes('"committed_per_step"'));
// A bundle of schema 1.4 or later whose run measured its device's ceilings (the roofline draws them itself).
const MEASURED = BUNDLES.find((b) => readFileSync(b.path, 'utf8').includes('"device_peaks"'));

// ---- expected values, computed here from the bundle file (independently of the Rust code) ----------
function median(xs) {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
const ok = (c) => c.status.state === 'ok' && c.repetitions.length > 0;
const close = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));
const load = (b) => JSON.parse(readFileSync(b.path, 'utf8'));
const shapes = (bundle) => [...new Set(bundle.cells.map((c) => `${c.key.batch_size},${c.key.seq_len}`))]
  .map((s) => s.split(',').map(Number));

const checks = [];
function pass(msg) {
  checks.push(msg);
  console.log(`  ok  ${msg}`);
}

async function drawCount(page) {
  return Number((await page.getAttribute(CHART, 'data-draw-count')) || 0);
}
/** Runs `act`, then waits for the canvas to be redrawn (or to report nothing to draw). */
async function redraw(page, act) {
  const before = await drawCount(page);
  await act();
  await page.waitForFunction(([sel, n]) => {
    const c = document.querySelector(sel);
    return c && Number(c.dataset.drawCount || 0) > n && c.dataset.drawn !== 'false';
  }, [CHART, before], { timeout: TIMEOUT });
}
async function figure(page) {
  return JSON.parse(await page.getAttribute(CHART, 'data-figure'));
}
async function waitLoaded(page, file) {
  await page.waitForFunction(
    ([sel, f]) => document.querySelector(sel)?.dataset.drawn === 'true' &&
      document.querySelector('[data-testid="provenance"] .source')?.textContent === f,
    [CHART, file], { timeout: TIMEOUT });
}
function bundle_stem(file) {
  return file.replace(/\.json$/, '');
}
async function view(page, slug) {
  await page.click(`[data-testid="tab-${slug}"]`);
  await page.waitForSelector(`[data-testid="view-${slug}"]`, { timeout: TIMEOUT });
}
async function setFilter(page, name, value) {
  await page.selectOption(`[data-testid="filter-${name}"]`, String(value));
}
/**
 * Canvas pixels where each mark shows its own paint, away from anything written or drawn across it (no check
 * may depend on where the glyphs of measured numbers land: a heat cell's centre holds its value as text).
 *  - heat cells and bars: the four corners of the mark's box (`x0..x1`, `y0..y1` of its hit), inset by
 *    2 pixels per devicePixelRatio (less on a narrow mark): the label, and a bar's error bar, are centred;
 *  - points: four pixels diagonally around the centre, inside the smallest marker (the compared bundle's
 *    triangle) and off the vertical and horizontal lines through the centre (an error bar, grid lines on
 *    the tick the point sits on), which are drawn whether the marker is or not.
 */
function paintSamples(fig, h, scale) {
  if (fig.plot.kind === 'pair') {
    const first = fig.plot.first.plot;
    const n = first.kind === 'heat' ? first.panels.length : first.series.length;
    return h.series < n ? paintSamples(fig.plot.first, h, scale) : paintSamples(fig.plot.second, { ...h, series: h.series - n }, scale);
  }
  const box = fig.plot.kind === 'heat' || fig.plot.series[h.series].style.kind === 'bars';
  if (!box) {
    const d = Math.ceil(scale); // pixels cx + d and cx - d - 1: centres (d + 0.5) either side
    return [[h.x - d - 1, h.y - d - 1], [h.x + d, h.y - d - 1], [h.x - d - 1, h.y + d], [h.x + d, h.y + d]];
  }
  const [x0, x1, y0, y1] = [Math.min(h.x0, h.x1), Math.max(h.x0, h.x1), Math.min(h.y0, h.y1), Math.max(h.y0, h.y1)];
  if (x1 - x0 < 1 || y1 - y0 < 1) return [];
  const inset = Math.round(2 * scale);
  const [ix, iy] = [Math.min(inset, Math.floor((x1 - x0 - 1) / 2)), Math.min(inset, Math.floor((y1 - y0 - 1) / 2))];
  return [[x0 + ix, y0 + iy], [x1 - 1 - ix, y0 + iy], [x0 + ix, y1 - 1 - iy], [x1 - 1 - ix, y1 - 1 - iy]];
}
/** The marks of the chart whose paint is missing: a sample pixel (paintSamples) is background white. */
async function unpaintedMarks(page) {
  const hits = JSON.parse(await page.getAttribute(CHART, 'data-hits'));
  const fig = await figure(page);
  const scale = await page.$eval(CHART, (c) => c.width / c.clientWidth);
  const samples = hits.map((h) => ({ series: h.series, mark: h.mark, at: paintSamples(fig, h, scale) }));
  const unpainted = await page.$eval(CHART, (c, marks) => {
    const ctx = c.getContext('2d');
    const rgb = ([x, y]) => [...ctx.getImageData(x, y, 1, 1).data.slice(0, 3)];
    const white = (p) => rgb(p).every((v) => v > 245);
    // A mark too small to sample counts as unpainted.
    return marks.filter((m) => m.at.length === 0 || m.at.some(white)).map((m) => ({ ...m, rgb: m.at.map(rgb) }));
  }, samples);
  return { hits, unpainted };
}
/** Every mark of the chart is painted. Returns the hits. */
async function marksPainted(page) {
  const { hits, unpainted } = await unpaintedMarks(page);
  assert.deepEqual(unpainted, [], 'marks not painted (white where the mark should be)');
  return hits;
}
async function hover(page, hit) {
  const scale = await page.$eval(CHART, (c) => c.width / c.clientWidth);
  await page.hover(CHART, { position: { x: hit.x / scale, y: hit.y / scale } });
  const tip = await page.waitForSelector('[data-testid="chart-tooltip"]', { timeout: TIMEOUT });
  // On screen: over the pointer in the window's lower half, under it in the upper half.
  const box = await tip.boundingBox();
  const vh = page.viewportSize().height;
  assert.ok(box.y >= 0 && box.y + box.height <= vh, `tooltip inside the window: ${JSON.stringify(box)} of ${vh}`);
  return tip.textContent();
}

/** Latency vs steps for every (B, N) of a bundle. */
async function checkLatency(page, b) {
  const bundle = load(b);
  const p = bundle.provenance;
  const prov = await page.textContent('[data-testid="provenance"]');
  for (const s of [p.tool_version, p.created_at, p.config_source, p.git_commit, p.host, p.device.name,
    p.device.cuda_version].filter(Boolean)) {
    assert.ok(prov.includes(s), `${b.file}: provenance does not show ${JSON.stringify(s)}`);
  }
  assert.equal(Boolean(await page.$('[data-testid="synthetic-badge"]')), Boolean(p.synthetic_weights));
  // A bundle with fewer cells than its run planned, or continuations an evaluator has not scored (a value or an
  // error), says so (metrics::coverage).
  const evaluators = ((p.config.quality || {}).evaluators || []).map((e) => e.id);
  const settled = (c, e) => [...(c.quality || []), ...(c.quality_errors || [])]
    .some((q) => q.metric === 'perplexity' && q.evaluator === e);
  const unscored = bundle.cells.filter((c) => (c.generations || []).length > 0
    && evaluators.some((e) => !settled(c, e))).length;
  const partial = (p.planned_cells != null && bundle.cells.length < p.planned_cells)
    || (p.missing_cells || []).length > 0 || unscored > 0;
  const badge = await page.$('[data-testid="partial-badge"]');
  assert.equal(Boolean(badge), partial, `${b.file}: partial badge`);
  if (partial && p.planned_cells != null) {
    assert.ok((await badge.textContent()).includes(`${bundle.cells.length} of ${p.planned_cells} planned cells`));
  }
  pass(`${b.file}: provenance (tool, commit, created, host, device, CUDA, config, synthetic and partial badges)`);
  // The landing view is the answer; the latencies are the next tab (the view stays when the bundle changes).
  if (await page.getAttribute('[data-testid="tab-latency"]', 'aria-selected') !== 'true') {
    await redraw(page, () => view(page, 'latency'));
  }
  let n = 0;
  for (const [B, N] of shapes(bundle)) {
    await redraw(page, async () => { await setFilter(page, 'B', B); await setFilter(page, 'N', N); });
    const cells = bundle.cells.filter((c) => ok(c) && c.key.batch_size === B && c.key.seq_len === N);
    // A diffusion cell sits at its K, a threshold cell (schema 1.5) at the forwards it ran (median, rounded up).
    const at = (c) => c.key.steps ?? Math.ceil(median(c.repetitions.map((r) => r.forward_passes)));
    const want = cells.filter((c) => c.key.sampler !== 'ar_greedy').map((c) => [at(c), median(c.repetitions.map((r) => r.e2e_ms))]);
    const ar = cells.filter((c) => c.key.sampler === 'ar_greedy').map((c) => median(c.repetitions.map((r) => r.e2e_ms)));
    if (want.length === 0) continue;
    const f = await figure(page);
    assert.match(f.title, new RegExp(`B = ${B}, N = ${N}`));
    const byXY = (x, y) => x[0] - y[0] || x[1] - y[1];
    const got = f.plot.series.flatMap((s) => s.marks.map((m) => [m.x, m.y])).sort(byXY);
    want.sort(byXY);
    assert.equal(got.length, want.length, `B=${B} N=${N}: points`);
    got.forEach((g, i) => assert.ok(g[0] === want[i][0] && close(g[1], want[i][1]), `B=${B} N=${N}: ${g} != ${want[i]}`));
    const refs = f.plot.refs.map((r) => r.value);
    assert.equal(refs.length, ar.length, `B=${B} N=${N}: AR reference`);
    ar.forEach((v, i) => assert.ok(close(refs[i], v)));
    assert.equal((await marksPainted(page)).length, want.length);
    n++;
  }
  pass(`${b.file}: latency vs steps matches the bundle's medians (and AR line) in all ${n} (B, N) shapes`);
  await page.click('[data-testid="reset-filters"]');
}

async function checkViews(page) {
  const bundle = load(STUDY);
  await page.selectOption('[data-testid="bundle-select"]', STUDY.file);
  await waitLoaded(page, STUDY.file);
  if (await page.getAttribute('[data-testid="tab-latency"]', 'aria-selected') !== 'true') {
    await redraw(page, () => view(page, 'latency'));
  }

  // Hover and click on latency vs steps.
  await redraw(page, async () => { await setFilter(page, 'B', 1); await setFilter(page, 'N', 128); });
  const hits = await marksPainted(page);
  const f = await figure(page);
  const m = f.plot.series[hits[1].series].marks[hits[1].mark];
  const tip = await hover(page, hits[1]);
  assert.ok(tip.includes(`K=${m.x}`) && tip.includes(`median ${m.y.toFixed(2)} ms`), `tooltip: ${tip}`);
  await page.screenshot({ path: `${SHOTS}-tooltip.png`, clip: await (await page.$('.chart-frame')).boundingBox() });
  pass(`hover shows the exact value and key: "${tip.split('\n').slice(0, 2).join(' | ')}"`);
  // The lowest mark's tooltip: over the pointer when the mark is in the window's lower half (hover checks that it
  // stays inside the window).
  const low = hits.reduce((a, h) => (h.y > a.y ? h : a));
  await hover(page, low);
  const lowY = await page.$eval(CHART, (c, y) => c.getBoundingClientRect().top + y * c.clientWidth / c.width, low.y);
  const vh = page.viewportSize().height;
  assert.equal(await page.getAttribute('[data-testid="chart-tooltip"]', 'data-above'), String(lowY > vh / 2));
  pass(`the tooltip of the lowest mark (at ${Math.round(lowY)} of ${vh} px) stays inside the window`);
  await page.click(CHART, { position: { x: hits[1].x / DPR, y: hits[1].y / DPR } });
  const details = await (await page.waitForSelector('[data-testid="cell-details"]', { timeout: TIMEOUT })).textContent();
  assert.ok(details.includes(`K=${m.x}`) && details.includes(`median ${m.y.toFixed(2)} ms`), details);
  pass('clicking a point shows its cell');
  await page.mouse.move(0, 0);
  // From the keyboard: the canvas is in the Tab order, the arrows step through the marks in drawing order (a ring
  // on the mark, its tooltip), End goes to the last, Enter shows its cell, Escape leaves the marks.
  const tipOf = (h) => f.plot.series[h.series].marks[h.mark];
  const keyTip = async (i) => {
    await page.waitForSelector(`[data-testid="mark-focus"][data-mark="${i}"]`, { timeout: TIMEOUT });
    const t = await page.textContent('[data-testid="chart-tooltip"]');
    const k = tipOf(hits[i]);
    assert.ok(t.includes(`K=${k.x}`) && t.includes(`median ${k.y.toFixed(2)} ms`), `mark ${i} from the keyboard: ${t}`);
    const ring = await (await page.$('[data-testid="mark-focus"]')).boundingBox();
    const at = await page.$eval(CHART, (c, h) => {
      const r = c.getBoundingClientRect();
      return { x: r.left + c.clientLeft + h.x * c.clientWidth / c.width, y: r.top + c.clientTop + h.y * c.clientWidth / c.width };
    }, hits[i]);
    assert.ok(Math.abs(ring.x + ring.width / 2 - at.x) <= 2 && Math.abs(ring.y + ring.height / 2 - at.y) <= 2,
      `the ring on mark ${i}: ${JSON.stringify(ring)} against ${JSON.stringify(at)}`);
    return t;
  };
  assert.equal(await page.getAttribute(CHART, 'tabindex'), '0');
  await page.focus(CHART);
  await page.keyboard.press('ArrowRight');
  await keyTip(0);
  await page.keyboard.press('ArrowRight');
  await keyTip(1);
  await page.keyboard.press('ArrowLeft');
  await keyTip(0);
  await page.keyboard.press('End');
  const last = hits.length - 1;
  await keyTip(last);
  await page.screenshot({ path: `${SHOTS}-keyboard.png`, clip: await (await page.$('.chart-frame')).boundingBox() });
  await page.keyboard.press('Enter');
  await page.waitForFunction(([k, ms]) => {
    const t = document.querySelector('[data-testid="cell-details"]')?.textContent ?? '';
    return t.includes(`K=${k}`) && t.includes(`median ${ms} ms`);
  }, [tipOf(hits[last]).x, tipOf(hits[last]).y.toFixed(2)], { timeout: TIMEOUT });
  await page.focus(CHART);
  await page.keyboard.press('Escape');
  await page.waitForSelector('[data-testid="chart-tooltip"]', { state: 'detached', timeout: TIMEOUT });
  assert.ok(!(await page.$('[data-testid="mark-focus"]')), 'Escape leaves the marks');
  pass(`the chart from the keyboard: the arrows step through its ${hits.length} marks, End, Enter shows the cell, Escape`);
  await page.click('[data-testid="reset-filters"]');

  // Throughput at N = 128: each bar is the median tokens/s of its cell.
  await redraw(page, () => view(page, 'throughput'));
  await redraw(page, () => setFilter(page, 'N', 128));
  let fig = await figure(page);
  const tps = (c) => median(c.repetitions.map((r) => r.output_tokens / (r.e2e_ms / 1000)));
  const cells128 = bundle.cells.filter((c) => ok(c) && c.key.seq_len === 128);
  const bars = fig.plot.series.flatMap((s) => s.marks);
  assert.equal(bars.length, cells128.length, 'one bar per successful cell');
  for (const bar of bars) {
    const c = bundle.cells[bar.cell.cell];
    assert.ok(close(bar.y, tps(c)), `bar ${bar.y} != ${tps(c)}`);
    assert.ok(bar.lo <= bar.y && bar.y <= bar.hi, 'error bar spans the median');
  }
  assert.equal(fig.plot.series[0].label.includes('autoregressive') || fig.plot.series[0].colour > 1e6, true, 'AR first');
  await marksPainted(page);
  await page.screenshot({ path: `${SHOTS}-throughput.png`, fullPage: true });
  pass(`throughput: ${bars.length} bars = median tokens/s of each cell, with min..max error bars`);
  // As lines over B: the same numbers, a line per series with B on the x axis.
  await redraw(page, () => page.selectOption('[data-testid="throughput-shape"]', 'lines'));
  const lines = await figure(page);
  assert.equal(lines.plot.x.label, 'batch size B');
  assert.ok(lines.plot.series.every((s) => s.style.kind === 'line'), 'lines');
  const points = lines.plot.series.flatMap((s) => s.marks);
  assert.equal(points.length, cells128.length, 'one point per successful cell');
  for (const p of points) assert.ok(close(p.y, tps(bundle.cells[p.cell.cell])), `point ${p.y}`);
  assert.ok((await page.evaluate(() => location.search)).includes('tp=lines'), 'in the address');
  await redraw(page, () => page.selectOption('[data-testid="throughput-shape"]', 'bars'));
  pass(`throughput as lines over B: ${lines.plot.series.length} lines, the bars' numbers`);

  // A filter changes the chart.
  await redraw(page, () => setFilter(page, 'K', 16));
  fig = await figure(page);
  assert.equal(fig.plot.series.length, 2, 'K=16: AR + LLaDA K=16');
  pass('the K filter redraws the chart with fewer series (AR kept as the reference)');
  await redraw(page, () => page.click('[data-testid="reset-filters"]'));

  // Memory: labels in the unit that fits the values (MB when every peak is below 1 GB), OOM marks.
  await redraw(page, () => view(page, 'memory'));
  fig = await figure(page);
  assert.equal(fig.plot.kind, 'heat');
  const peaks = bundle.cells.filter(ok).flatMap((c) => c.repetitions.map((r) => r.peak_allocated_bytes));
  const [unit, per] = Math.max(...peaks) < 1e9 ? ['MB', 1e6] : ['GB', 1e9];
  assert.equal(fig.plot.unit, unit, 'the colour bar unit');
  for (const panel of fig.plot.panels) {
    for (const cell of panel.cells) {
      const N = Number(fig.plot.y.categories[cell.row]);
      const B = Number(fig.plot.x.categories[cell.col]);
      const model = bundle.cells[cell.cell.cell].key.model;
      const same = bundle.cells.filter((c) => c.key.model === model && c.key.seq_len === N && c.key.batch_size === B);
      const oom = same.filter((c) => c.status.state === 'oom').length;
      const ran = same.filter(ok).flatMap((c) => c.repetitions.map((r) => r.peak_allocated_bytes));
      const peak = Math.max(...ran);
      // Every cell out of memory: OOM; some: the peak of those that ran, with the count that did not fit.
      assert.equal(cell.oom, oom > 0 && ran.length === 0);
      const measured = `${(peak / per).toFixed(2)} ${unit}`;
      assert.equal(cell.text, ran.length === 0 ? 'OOM' : oom > 0 ? `${measured}, ${oom} OOM` : measured);
    }
  }
  await marksPainted(page);
  await page.screenshot({ path: `${SHOTS}-memory.png`, fullPage: true });
  const oomCells = fig.plot.panels.flatMap((p) => p.cells).filter((c) => c.oom || c.text.endsWith(' OOM')).length;
  pass(`memory: ${fig.plot.panels.length} heatmaps, ${unit} labels = the largest peak allocated, ${oomCells} cell(s) with OOM marked`);
  await redraw(page, () => page.selectOption('[data-testid="memory-metric"]', 'reserved'));
  assert.match((await figure(page)).title, /reserved/);
  pass('memory: the reserved toggle redraws');
  await redraw(page, () => page.selectOption('[data-testid="memory-metric"]', 'allocated'));

  // TTFT / ITL.
  await redraw(page, () => view(page, 'ttft-itl'));
  fig = await figure(page);
  for (const s of fig.plot.series) {
    for (const mk of s.marks) {
      const c = bundle.cells[mk.cell.cell];
      const ttft = median(c.repetitions.map((r) => r.prefill_ms));
      const itl = median(c.repetitions.map((r) => (r.e2e_ms - r.prefill_ms) / (c.key.output_tokens - 1)));
      assert.ok(close(mk.y, s.label.includes('TTFT') ? ttft : itl), `${s.label}: ${mk.y}`);
    }
  }
  await page.screenshot({ path: `${SHOTS}-ttft-itl.png`, fullPage: true });
  pass(`TTFT / ITL: ${fig.plot.series.length} series match prefill and (e2e - prefill) / (N_out - 1)`);

  // Time per step.
  await redraw(page, () => view(page, 'step-time'));
  fig = await figure(page);
  for (const mk of fig.plot.series.flatMap((s) => s.marks)) {
    const c = bundle.cells[mk.cell.cell];
    assert.ok(close(mk.y, median(c.repetitions.flatMap((r) => r.step_ms))), 'step time');
  }
  pass(`time per step: ${fig.plot.series.flatMap((s) => s.marks).length} points = median of every step`);

  // Pareto frontier at B=1, N=256: LLaDA dominates LLaMA.
  await redraw(page, () => view(page, 'pareto'));
  await redraw(page, async () => { await setFilter(page, 'B', 1); await setFilter(page, 'N', 256); });
  fig = await figure(page);
  const front = fig.plot.series.find((s) => s.style.kind === 'frontier');
  assert.deepEqual(front.marks.map((x) => x.y), [70, 25, 10.2, 9.5]);
  const arPoint = fig.plot.series.find((s) => s.label.includes('autoregressive')).marks[0];
  assert.ok(arPoint.tip.includes('dominated'));
  const arHit = JSON.parse(await page.getAttribute(CHART, 'data-hits'))
    .find((h) => fig.plot.series[h.series].label.includes('autoregressive'));
  assert.match(await hover(page, arHit), /perplexity 10\.5000 \(lower is better\)/);
  await page.mouse.move(0, 0);
  await page.screenshot({ path: `${SHOTS}-pareto.png`, fullPage: true });
  pass('Pareto: frontier = LLaDA K 8..64, LLaMA dominated (tooltip says so)');

  // Quality vs steps with S_parity marked.
  await redraw(page, () => view(page, 'quality'));
  fig = await figure(page);
  assert.ok(fig.plot.refs.some((r) => r.vertical && r.value === 32 && r.label.includes('S_parity = 32')));
  // Each S_parity line in its series' colour, its label naming the series.
  for (const r of fig.plot.refs.filter((x) => x.vertical)) {
    assert.ok(fig.plot.series.some((s) => s.colour === r.colour && r.label.endsWith(`of ${s.label}`)), r.label);
  }
  await page.screenshot({ path: `${SHOTS}-quality.png`, fullPage: true });
  pass('quality vs steps: LLaMA reference and S_parity = 32 marked, in its series\' colour and named after it');

  // Each view shows the log x / log y options only where they act (K is always on a log2 axis, heat maps and the
  // log-log roofline have no linear axis).
  const logX = ['answer', 'pareto', 'ttft-itl'];
  const logY = ['answer', 'latency', 'pareto', 'quality', 'throughput', 'ttft-itl', 'step-time'];
  for (const slug of ['answer', 'latency', 'pareto', 'parity', 'quality', 'throughput', 'memory', 'ttft-itl', 'step-time', 'roofline', 'details']) {
    await view(page, slug);
    assert.equal(await page.isVisible('[data-testid="log-x"]'), logX.includes(slug), `log x shown in ${slug}`);
    assert.equal(await page.isVisible('[data-testid="log-y"]'), logY.includes(slug), `log y shown in ${slug}`);
  }
  pass('log x / log y show only in the views they act on');

  // S_parity panel.
  await page.click('[data-testid="reset-filters"]');
  await view(page, 'parity');
  await page.waitForSelector('[data-testid="parity-table"]', { timeout: TIMEOUT });
  const rows = await page.$$eval('[data-testid="parity-row"]', (trs) => trs.map((tr) => Object.fromEntries(
    ['B', 's', 'interval', 'speedup', 'verdict', 'warning'].map((k) => [k, tr.querySelector(`[data-testid="parity-${k}"]`).textContent]))));
  assert.equal(rows.length, 4);
  const ar256 = median(bundle.cells.find((c) => c.key.steps == null && c.key.batch_size === 1 && c.key.seq_len === 256).repetitions.map((r) => r.e2e_ms));
  const k32 = median(bundle.cells.find((c) => c.key.steps === 32 && c.key.batch_size === 1 && c.key.seq_len === 256).repetitions.map((r) => r.e2e_ms));
  const viable = rows.find((r) => r.verdict.startsWith('viable'));
  assert.deepEqual([viable.B, viable.s, viable.interval, viable.speedup], ['1', 'K = 32', '(16, 32]', `${(ar256 / k32).toFixed(2)}x`]);
  assert.ok(rows.some((r) => r.s === 'K = 64' && r.warning.includes('entropy')), 'low-entropy warning');
  await page.screenshot({ path: `${SHOTS}-parity.png`, fullPage: true });
  pass(`S_parity panel: 4 rows; B=1 N=256 viable at K=32 with speedup ${viable.speedup}; entropy warning shown`);

  // Run details: every cell, sortable.
  await view(page, 'details');
  const count = await (await page.waitForSelector('[data-testid="table-count"]')).textContent();
  assert.ok(count.startsWith(`${bundle.cells.length} cells match`), count);
  // Paging: no previous page on the first; a next one only when the cells fill more than a page (100 rows).
  assert.ok(await page.isDisabled('[data-testid="page-prev"]'), 'previous on the first page');
  assert.equal(await page.isDisabled('[data-testid="page-next"]'), bundle.cells.length <= 100, 'next');
  await page.click('[data-testid="sort-e2e_ms_median"]');
  await page.click('[data-testid="sort-e2e_ms_median"]');
  const first = await page.$eval('[data-testid="cell-row"] td:nth-child(8)', (td) => td.textContent);
  const slowest = Math.max(...bundle.cells.filter(ok).map((c) => median(c.repetitions.map((r) => r.e2e_ms))));
  assert.equal(Number(first), Number(slowest.toFixed(3)));
  assert.ok((await page.textContent('[data-testid="cell-table"]')).includes('oom: '));
  await page.screenshot({ path: `${SHOTS}-details.png`, fullPage: true });
  pass(`run details: ${bundle.cells.length} cells with status; sorted by latency (descending) the slowest is first`);

  // CSV export of the filtered cells.
  await setFilter(page, 'N', 256);
  await setFilter(page, 'B', 4);
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid="export-csv"]')]);
  const csv = readFileSync(await download.path(), 'utf8').trim().split('\n');
  const want = bundle.cells.filter((c) => c.key.seq_len === 256 && c.key.batch_size === 4);
  assert.equal(csv.length, 1 + want.length, 'header + the filtered cells');
  assert.match(csv[0], /^bundle,model,sampler,K,B,N,status,e2e_ms_median.*,synthetic_weights,device$/);
  for (const line of csv.slice(1)) assert.match(line, /,4,256,(ok|oom).*,true,cuda /);
  assert.equal(download.suggestedFilename(), `${bundle_stem(STUDY.file)}-cells.csv`, 'named after the bundle');
  pass(`CSV export: ${want.length} filtered cells (N=256, B=4) + header`);
  await page.click('[data-testid="reset-filters"]');

  // PNG export.
  await redraw(page, () => view(page, 'latency'));
  const [png] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid="export-png"]')]);
  const bytes = readFileSync(await png.path());
  assert.equal(bytes.subarray(1, 4).toString(), 'PNG');
  assert.equal(png.suggestedFilename(), `${bundle_stem(STUDY.file)}-latency.png`, 'named after the bundle and view');
  pass(`PNG export: ${png.suggestedFilename()} (${bytes.length} bytes)`);
}

/**
 * The paint check itself: on a page whose canvas fills no shape (no point marker, bar or heat cell; the white
 * background, lines, error bars and text, the heat cells' labels included, are still drawn), marksPainted
 * must fail for the points of latency vs steps, the bars of throughput and the cells of the memory heatmap.
 */
async function checkUnpaintedFails(context) {
  const page = await context.newPage();
  await page.addInitScript(() => {
    const C = CanvasRenderingContext2D.prototype;
    const fillRect = C.fillRect;
    C.fill = function () {};
    C.fillRect = function (...a) {
      const s = String(this.fillStyle);
      if (s === '#ffffff' || s.startsWith('rgba(255, 255, 255')) fillRect.apply(this, a);
    };
  });
  await page.route('**/*', (route) => (route.request().url().startsWith(BASE) ? route.continue() : route.abort()));
  const counts = [];
  try {
    for (const [slug, query] of [['latency', '&B=1&N=128'], ['throughput', '&N=128'], ['memory', '']]) {
      await page.goto(`${BASE}?bundle=${STUDY.file}&view=${slug}${query}`);
      await waitLoaded(page, STUDY.file);
      const { hits, unpainted } = await unpaintedMarks(page);
      assert.ok(hits.length > 0, `${slug}: no marks to check`);
      assert.equal(unpainted.length, hits.length, `${slug}: marks not painted pass the paint check`);
      counts.push(`${hits.length} ${slug}`);
    }
  } finally {
    await page.close();
  }
  pass(`the paint check fails on every unfilled mark (${counts.join(', ')}) though labels, lines, error bars are drawn`);
}

/** The roofline: intensity and achieved rate per cell, the ceilings from the peaks entered, the deep link. */
async function checkRoofline(page) {
  assert.ok(ROOFLINE, 'a bundle with flop_count is listed (schema/tests/fixtures/v1.2/demo-quality.json)');
  const bundle = load(ROOFLINE);
  await page.goto(`${BASE}?bundle=${ROOFLINE.file}`);
  await waitLoaded(page, ROOFLINE.file);
  await redraw(page, () => view(page, 'roofline'));
  let fig = await figure(page);
  const marks = fig.plot.series.flatMap((s) => s.marks);
  assert.equal(marks.length, bundle.cells.filter(ok).length, 'one point per successful cell');
  for (const mk of marks) {
    const c = bundle.cells[mk.cell.cell];
    const [flops, bytes] = [c.repetitions[0].flop_count, c.repetitions[0].weights_read_bytes];
    const secs = median(c.repetitions.map((r) => r.e2e_ms)) / 1e3;
    assert.ok(close(mk.x, flops / bytes) && close(mk.y, flops / secs / 1e12), `${mk.x} ${mk.y}`);
  }
  assert.deepEqual(fig.plot.series.map((s) => s.label.includes('(autoregressive)')), [true, false], 'AR and LLaDA series');
  assert.ok(fig.plot.x.log && fig.plot.y.log, 'log-log');
  const notes = await page.$$eval('[data-testid="note"]', (ps) => ps.map((p) => p.textContent).join(' '));
  assert.match(notes, /without ceilings/);
  const hits = await marksPainted(page);
  const tip = await hover(page, hits[0]);
  const m0 = fig.plot.series[hits[0].series].marks[hits[0].mark];
  assert.ok(tip.includes('TB/s of weights') && tip.includes(`achieved ${m0.y.toPrecision(4)} TFLOP/s`) && tip.includes('B=') , tip);
  pass(`roofline: ${marks.length} cells at FLOP/byte x achieved TFLOP/s (median L_e2e), log-log; tooltip "${tip.split('\n')[0]}"`);
  await page.mouse.move(0, 0);

  // The peaks the user enters draw the ceilings and go into the address.
  await redraw(page, async () => {
    await page.fill('[data-testid="peak-bw"]', '0.01');
    await page.press('[data-testid="peak-bw"]', 'Tab');
  });
  await redraw(page, async () => {
    await page.fill('[data-testid="peak-flops"]', '0.02');
    await page.press('[data-testid="peak-flops"]', 'Tab');
  });
  fig = await figure(page);
  const roof = fig.plot.series.find((s) => s.style.kind === 'frontier');
  assert.ok(roof && roof.label.includes('0.01 TB/s') && roof.label.includes('0.02 TFLOP/s'), JSON.stringify(roof));
  assert.ok(roof.marks.some((p) => close(p.x, 2) && close(p.y, 0.02)), 'ridge point at 0.02e12 / 0.01e12 FLOP/byte');
  assert.ok(page.url().includes('peak_bw=0.01') && page.url().includes('peak_flops=0.02'), page.url());
  await page.screenshot({ path: `${SHOTS}-roofline.png`, fullPage: true });
  pass(`roofline ceilings from the entered peaks (ridge at 2 FLOP/byte); the address: ${page.url().replace(BASE, '')}`);
  // The deep link restores them.
  await page.goto(page.url());
  await waitLoaded(page, ROOFLINE.file);
  assert.equal(await page.$eval('[data-testid="peak-bw"]', (i) => i.value), '0.01');
  assert.ok((await figure(page)).plot.series.some((s) => s.style.kind === 'frontier'));
  pass('a deep link restores the roofline view and its peaks');
  // A bundle whose run measured its device draws the ceilings with nothing entered.
  if (MEASURED) {
    const peaks = load(MEASURED).provenance.executions.find((e) => e.device_peaks).device_peaks;
    await page.goto(`${BASE}?bundle=${MEASURED.file}&view=roofline`);
    await waitLoaded(page, MEASURED.file);
    const roof = (await figure(page)).plot.series.find((s) => s.style.kind === 'frontier');
    assert.ok(roof && roof.label.includes('measured'), JSON.stringify(roof && roof.label));
    assert.ok(roof.marks.every((p) => p.y <= peaks.matmul_flops_per_s / 1e12 * (1 + 1e-9)), 'ceiling at the matmul rate');
    const notes = await page.$$eval('[data-testid="note"]', (ps) => ps.map((p) => p.textContent).join(' '));
    assert.match(notes, /Ceilings measured by the run/);
    pass(`roofline ceilings measured by the run (${MEASURED.file}), nothing entered`);
  }
  // Older bundles say why there is nothing to show.
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=roofline`);
  const msg = await (await page.waitForSelector('[data-testid="no-roofline"]', { timeout: TIMEOUT })).textContent();
  assert.match(msg, /No roofline data in this bundle/);
  pass('a bundle without the work counts says so on the roofline view');
}

/**
 * The landing view: the answer first. Its verdict cells are the speedups of the bundle's stored parity records,
 * which the runner's `metrics::parity` wrote (the numbers `report` prints); screenshots at 1400 and 390 px.
 */
async function checkAnswer(page) {
  const b = [SERIES, ...BUNDLES].find((x) => x && load(x).parity?.length) ?? assert.fail("a bundle with stored parity records");
  const bundle = load(b);
  await page.setViewportSize({ width: 1400, height: 1000 });
  await page.goto(`${BASE}?bundle=${b.file}`);
  await waitLoaded(page, b.file);
  assert.equal(await page.getAttribute('[data-testid="tab-answer"]', 'aria-selected'), 'true', 'the answer is the landing view');
  assert.equal(await page.getAttribute('[data-testid="provenance"]', 'open'), null, 'provenance collapsed');
  const pair = await figure(page);
  // The verdict, with the Pareto frontier beside it (the Pareto tab's figure).
  assert.equal(pair.plot.kind, 'pair');
  const fig = pair.plot.first;
  assert.equal(fig.plot.kind, 'heat');
  assert.ok(pair.plot.second.title.startsWith('Pareto frontier'), pair.plot.second.title);
  const cells = fig.plot.panels.flatMap((p) => p.cells);
  const rows = bundle.parity.flatMap((r) => r.speedups.map((s) => [r, s]));
  assert.equal(cells.length, rows.length, 'one verdict cell per record and batch size');
  for (const [r, s] of rows) {
    // Without a speedup: parity not reached, or reached with no timing at S_parity (metrics::parity::no_speedup_label).
    const none = { reached: 'not measured', not_reached: 'no parity' }[r.outcome.outcome] ?? 'no data';
    const text = s.speedup ? `${s.speedup.value.toFixed(2)}x` : none;
    const hit = cells.find((c) => c.tip.includes(`N = ${r.seq_len}, B = ${s.batch_size}`) && c.text.replace(/\??\*?$/, "") === text &&
      (s.speedup ? close(c.value, Math.log2(s.speedup.value)) : c.value == null));
    assert.ok(hit, `no verdict cell ${text} at N = ${r.seq_len}, B = ${s.batch_size}`);
    // Marked ? exactly where S_parity was reached in fewer than all bootstrap resamples (report's warning).
    const unsure = r.outcome.outcome === 'reached' && r.reached_fraction != null && r.reached_fraction < 1;
    if (s.speedup) assert.equal(hit.text.includes('?'), unsure, `the uncertain mark at N = ${r.seq_len}, B = ${s.batch_size}`);
  }
  const notes = await page.$$eval('[data-testid="note"]', (ps) => ps.map((p) => p.textContent));
  const faster = rows.filter(([, s]) => s.speedup && s.speedup.value > 1).length;
  assert.ok(notes[0].includes(`faster in ${faster} of the ${rows.length}`), notes[0]);
  // The frontier's points are painted and hoverable (no paint check on the verdict cells: a speedup near 1x is
  // drawn near white by design).
  const { hits, unpainted } = await unpaintedMarks(page);
  const panels = fig.plot.panels.length;
  assert.deepEqual(unpainted.filter((m) => m.series >= panels), [], 'Pareto points not painted');
  const point = hits.find((h) => h.series >= panels);
  const tip = await hover(page, point);
  assert.ok(/on the Pareto frontier|dominated/.test(tip), `tooltip of a Pareto point: ${tip}`);
  await page.screenshot({ path: `${SHOTS}-answer.png`, fullPage: true });
  // On a phone the page is drawn at its width: the frontier below the verdict, on a taller canvas.
  await page.setViewportSize({ width: 390, height: 900 });
  await page.reload();
  await waitLoaded(page, b.file);
  const [w, h] = await page.$eval(CHART, (c) => [c.clientWidth, c.clientHeight]);
  assert.ok(w < 900 && h > w, `a narrow answer stacks its two charts (${w} x ${h})`);
  const narrow = await unpaintedMarks(page);
  const top = Math.max(...narrow.hits.filter((x) => x.series < panels).map((x) => x.y));
  assert.ok(narrow.hits.filter((x) => x.series >= panels).every((x) => x.y > top), 'the frontier is below the verdict');
  await page.screenshot({ path: `${SHOTS}-answer-390.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 1000 });
  pass(`${b.file}: the answer first: ${cells.length} verdict cells equal the stored parity records; "${notes[0].slice(0, 60)}..."`);
}

/**
 * The chart above the fold: at 1400 x 900 every chart view's canvas starts within the first 300 px, and on a phone
 * (390 x 844) within the first screen, with the bundle bar, tabs and filters above it.
 */
async function checkAboveTheFold(page) {
  const tops = [];
  for (const [w, h, limit] of [[1400, 900, 300], [390, 844, 844]]) {
    await page.setViewportSize({ width: w, height: h });
    for (const v of ['answer', 'latency', 'pareto']) {
      await page.goto(`${BASE}?bundle=${STUDY.file}${v === 'answer' ? '' : `&view=${v}`}`);
      await waitLoaded(page, STUDY.file);
      const top = await page.$eval(CHART, (c) => c.getBoundingClientRect().top);
      assert.ok(top < limit, `${v} at ${w} x ${h}: the chart starts ${top} px down (limit ${limit})`);
      tops.push(`${v} ${w}px: ${Math.round(top)}`);
    }
    await page.screenshot({ path: `${SHOTS}-fold-${w}.png` });
    // Every control is still reachable: the bundle bar, the file pickers, the provenance's rows, the filters.
    for (const id of ['bundle-select', 'compare-select', 'provenance', 'tab-details', 'filter-model', 'reset-filters']) {
      assert.ok(await page.$(`[data-testid="${id}"]`), `${id} at ${w} px`);
    }
    await page.click('.open-files summary');
    assert.ok(await page.isVisible('[data-testid="file-input"]'), 'the file picker opens');
    const files = await page.$eval('.open-files .popover', (p) => {
      const r = p.getBoundingClientRect();
      return { left: r.left, right: r.right, page: document.documentElement.scrollWidth };
    });
    assert.ok(files.left >= 0 && files.right <= w && files.page <= w, `Open files at ${w} px: ${JSON.stringify(files)}`);
    // The popovers close as menus do: a click inside stays open, one outside (About's summary) closes it.
    await page.click('.open-files .hint');
    assert.ok(await page.isVisible('[data-testid="file-input"]'), 'a click inside Open files keeps it open');
    // About: what the study compares and what its numbers mean, inside the screen's width.
    await page.click('.about summary');
    assert.ok(!(await page.$('.open-files[open]')), 'opening About closes Open files');
    const about = await page.$eval('.about .popover', (p) => {
      const r = p.getBoundingClientRect();
      return { text: p.textContent, left: r.left, right: r.right, visible: r.width > 0 && r.height > 0 };
    });
    assert.ok(about.visible && about.text.includes('S_parity') && about.text.includes('SYNTHETIC'), about.text);
    assert.ok(about.left >= 0 && about.right <= w, `About at ${w} px spans ${about.left}..${about.right}`);
    if (w === 390) await page.screenshot({ path: `${SHOTS}-about-${w}.png` });
    await page.click('.about .popover p');
    assert.ok(await page.$('.about[open]'), 'a click on the text keeps About open');
    await page.keyboard.press('Escape');
    assert.ok(!(await page.$('.about[open]')), 'Escape closes About');
    await page.click('.about summary');
    await page.click('h1');
    assert.ok(!(await page.$('.about[open]')), 'a click outside closes About');
    await page.click('.about summary');
    await page.click('.about summary');
    assert.ok(!(await page.$('.about[open]')), 'its own summary still closes About');
  }
  await page.setViewportSize({ width: 1280, height: 1000 });
  pass(`the chart above the fold (its top edge, px: ${tops.join(', ')})`);
}

/**
 * Back and Forward move between views and bundles: a tab or a bundle is a new history entry, a filter edit
 * replaces the current one, and the page reads its state back from the address.
 */
async function checkHistory(page) {
  await page.setViewportSize({ width: 1280, height: 1000 });
  await page.goto(`${BASE}?bundle=${STUDY.file}`);
  await waitLoaded(page, STUDY.file);
  await view(page, 'latency');
  await view(page, 'pareto');
  await setFilter(page, 'B', 4);
  await page.waitForFunction(() => location.search.includes('B=4'), null, { timeout: TIMEOUT });
  const at = async (slug) => {
    await page.waitForSelector(`[data-testid="view-${slug}"]`, { timeout: TIMEOUT });
    return page.evaluate(() => location.search);
  };
  await page.goBack();
  let q = await at('latency');
  assert.ok(q.includes('view=latency') && !q.includes('B=4'), `Back from the Pareto view: ${q}`);
  assert.equal(await page.$eval('[data-testid="filter-B"]', (s) => s.value), '', 'the filters of that entry');
  await page.goBack();
  q = await at('answer');
  assert.ok(!q.includes('view='), `Back again: the answer (${q})`);
  await page.goForward();
  await at('latency');
  // Another bundle, then Back: the first one again.
  await page.selectOption('[data-testid="bundle-select"]', STUDY_B.file);
  await waitLoaded(page, STUDY_B.file);
  await page.goBack();
  await waitLoaded(page, STUDY.file);
  await at('latency');
  await page.goForward();
  await waitLoaded(page, STUDY_B.file);
  // The menus show each entry's values after Back and Forward, not the last ones chosen (an option's `selected`
  // attribute no longer moves a menu the user has changed; its property does).
  await view(page, 'pareto');
  await setFilter(page, 'N', 256);
  await view(page, 'latency');
  await setFilter(page, 'N', 128);
  await view(page, 'memory');
  await page.selectOption('[data-testid="memory-metric"]', 'reserved');
  await view(page, 'throughput');
  const menu = (id) => page.$eval(`[data-testid="${id}"]`, (s) => s.value);
  await page.goBack();
  await at('memory');
  assert.equal(await menu('memory-metric'), 'reserved', 'Back to the memory view: its metric');
  await page.goBack();
  await at('latency');
  assert.equal(await menu('filter-N'), '128', 'Back to the latency view: its N');
  await page.goBack();
  await at('pareto');
  assert.equal(await menu('filter-N'), '256', 'Back to the Pareto view: its N, not the last one chosen');
  assert.equal(await menu('memory-metric'), 'allocated', 'and the memory metric of that entry');
  await page.goForward();
  await at('latency');
  assert.equal(await menu('filter-N'), '128', 'Forward: the latency view, its N');
  pass('Back and Forward move between views and bundles; a filter edit is no history entry of its own; the menus follow');
  // The tab list from the keyboard: only the selected tab is in the Tab order; the arrows, Home and End select.
  const focused = () => page.evaluate(() => document.activeElement?.dataset.testid);
  const inOrder = await page.$$eval('[role="tab"]', (ts) => ts.filter((t) => t.tabIndex === 0).map((t) => t.dataset.testid));
  assert.deepEqual(inOrder, ['tab-latency'], 'one tab in the Tab order, the selected one');
  await page.focus('[data-testid="tab-latency"]');
  await page.keyboard.press('ArrowRight');
  await at('pareto');
  assert.equal(await focused(), 'tab-pareto', 'the focus follows the selection');
  await page.keyboard.press('End');
  await at('details');
  await page.keyboard.press('ArrowRight');
  await at('answer');
  await page.keyboard.press('ArrowLeft');
  await at('details');
  await page.keyboard.press('Home');
  await at('answer');
  assert.equal(await focused(), 'tab-answer');
  assert.equal(await page.$eval('[role="tabpanel"]', (p) => p.getAttribute('aria-labelledby')), 'tab-answer');
  pass('the tab list works from the keyboard: ArrowRight, ArrowLeft (wrapping), Home and End select and focus');
}

/**
 * A 390 px phone: the selected tab is scrolled into the tab strip after a view change (a deep link to the last
 * tab), and every chart view keeps its plots tall enough to read, alone and compared (the compared TTFT / ITL
 * chart's legend under its plot once left it 15 px tall, or none).
 */
async function checkPhone(page) {
  await page.setViewportSize({ width: 390, height: 844 });
  for (const v of ['details', 'roofline', 'answer']) {
    await page.goto(`${BASE}?bundle=${STUDY.file}${v === 'answer' ? '' : `&view=${v}`}`);
    await page.waitForSelector(`[data-testid="view-${v}"]`, { timeout: TIMEOUT });
    await page.waitForFunction((slug) => {
      const t = document.querySelector(`[data-testid="tab-${slug}"]`).getBoundingClientRect();
      const s = document.querySelector('.tabs').getBoundingClientRect();
      return t.left >= s.left - 1 && t.right <= s.right + 1;
    }, v, { timeout: TIMEOUT });
  }
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=details`);
  await page.waitForSelector('[data-testid="view-details"]', { timeout: TIMEOUT });
  await page.waitForTimeout(200);
  await page.screenshot({ path: `${SHOTS}-tabs-390.png` });
  pass('a phone: the selected tab is scrolled into the tab strip');
  // A tooltip of a mark on the right of a phone's chart stays on the screen.
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=latency`);
  await waitLoaded(page, STUDY.file);
  const marks = JSON.parse(await page.getAttribute(CHART, 'data-hits'));
  const right = marks.reduce((a, h) => (h.x > a.x ? h : a));
  await hover(page, right);
  const tip = await page.$eval('[data-testid="chart-tooltip"]', (t) => {
    const r = t.getBoundingClientRect();
    return { left: r.left, right: r.right };
  });
  assert.ok(tip.left >= 0 && tip.right <= 390, `a phone's tooltip spans ${tip.left}..${tip.right}`);
  pass(`a phone: the tooltip of the rightmost mark stays on the screen (${Math.round(tip.left)}..${Math.round(tip.right)} px)`);
  const demos = BUNDLES.filter((b) => /fixtures\/v1\.[2-9]\//.test(b.path));
  const sets = [[STUDY], [STUDY, STUDY_B], demos.slice(0, 1), demos.slice(0, 2)].filter((p) => p.length && p.every(Boolean));
  const views = ['answer', 'latency', 'pareto', 'quality', 'throughput', 'memory', 'ttft-itl', 'step-time', 'roofline'];
  let checked = 0;
  for (const set of sets) {
    for (const v of views) {
      const q = `?bundle=${set[0].file}${set[1] ? `&compare=${set[1].file}` : ''}${v === 'answer' ? '' : `&view=${v}`}`;
      await page.goto(`${BASE}${q}`);
      await page.waitForFunction(([sel, two]) => {
        const c = document.querySelector(sel);
        if (!c || c.dataset.drawn === 'false' || !document.querySelector(`[data-testid="view-${c.dataset.view}"]`)) return false;
        return c.dataset.drawn === 'empty' || !two || (c.dataset.figure || '').includes('[B] ');
      }, [CHART, set.length > 1], { timeout: TIMEOUT });
      const got = await page.$eval(CHART, (c) => ({
        drawn: c.dataset.drawn,
        kind: JSON.parse(c.dataset.figure || '{}').plot?.kind,
        plots: JSON.parse(c.dataset.plots || '[]'),
        scale: c.width / c.clientWidth,
      }));
      if (got.drawn !== 'true') continue;
      assert.ok(got.plots.length > 0, `${q} at 390 px: no plot recorded`);
      const least = got.kind === 'xy' ? 100 : 60;
      for (const p of got.plots) {
        const h = (p[3] - p[1]) / got.scale;
        assert.ok(h >= least, `${q} at 390 px: a plot ${h.toFixed(0)} px tall (at least ${least})`);
      }
      if (v === 'ttft-itl' && set.length > 1) await page.screenshot({ path: `${SHOTS}-ttft-compared-390.png`, fullPage: true });
      checked += 1;
    }
  }
  await page.setViewportSize({ width: 1280, height: 1000 });
  pass(`a phone (390 px): ${checked} charts keep every plot at least 100 px tall (heat maps 60)`);
}

/**
 * Energy (format 1.7): a bundle with energy offers the cost choice; energy per token replaces latency in latency vs
 * steps (each point the median of energy_j / output_tokens) and in the Pareto frontier; a bundle without has no
 * such choice.
 */
async function checkEnergy(page) {
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=latency`);
  await waitLoaded(page, STUDY.file);
  assert.equal(await page.$('[data-testid="cost-axis"]'), null, 'no energy choice without energy');
  const bundle = load(STUDY);
  bundle.cells.forEach((c, ci) => c.repetitions.forEach((r, ri) => {
    if (ci === 0) return; // a cell without energy: left out, never 0
    r.energy_j = r.output_tokens * 0.01 * (1 + ri + (ci % 3));
    r.energy_window_ms = r.e2e_ms;
  }));
  await page.setInputFiles('[data-testid="file-input"]', { name: 'energy.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(bundle)) });
  await waitLoaded(page, 'energy.json');
  await redraw(page, () => page.selectOption('[data-testid="cost-axis"]', 'energy'));
  assert.ok(page.url().includes('energy=1'), page.url());
  let f = await figure(page);
  assert.match(f.title, /^Energy per token vs diffusion steps/);
  const marks = f.plot.series.flatMap((s) => s.marks);
  assert.ok(marks.length > 0);
  for (const m of marks) {
    const c = bundle.cells[m.cell.cell];
    assert.ok(close(m.y, median(c.repetitions.map((r) => r.energy_j / r.output_tokens))), `${m.y}`);
  }
  await marksPainted(page);
  await page.screenshot({ path: `${SHOTS}-energy.png`, fullPage: true });
  await view(page, 'pareto');
  f = await figure(page);
  assert.match(f.title, /^Pareto frontier: energy vs/);
  for (const m of f.plot.series.flatMap((s) => s.marks).filter((m) => m.cell)) {
    const c = bundle.cells[m.cell.cell];
    assert.ok(close(m.x, median(c.repetitions.map((r) => r.energy_j / r.output_tokens))), `${m.x}`);
  }
  pass(`energy: ${marks.length} points at their median J/token in latency vs steps, and the Pareto frontier over energy`);
}

/** Sampler series (schema 1.5): their own legend entries, the Pareto view over forwards, one S_parity row each. */
async function checkSeries(page) {
  assert.ok(SERIES, 'a bundle with sampler series is listed (schema/tests/fixtures/v1.5/demo-series.json)');
  const bundle = load(SERIES);
  const [B, N] = [1, Math.min(...bundle.cells.map((c) => c.key.seq_len))];
  await page.goto(`${BASE}?bundle=${SERIES.file}&view=pareto&B=${B}&N=${N}&px=forwards`);
  await waitLoaded(page, SERIES.file);
  assert.equal(await page.$eval('[data-testid="pareto-x"]', (s) => s.value), 'forwards');
  const f = await figure(page);
  assert.match(f.title, /forward passes/);
  const fast = f.plot.series.find((s) => s.label.includes('prefix+threshold'));
  assert.ok(fast, `a legend entry of the fast series: ${f.plot.series.map((s) => s.label)}`);
  const marks = f.plot.series.flatMap((s) => s.marks).filter((m) => m.cell);
  assert.ok(marks.length >= 8, `${marks.length} points`);
  for (const m of marks) {
    const c = bundle.cells[m.cell.cell];
    assert.ok(close(m.x, median(c.repetitions.map((r) => r.forward_passes))), `x of ${JSON.stringify(c.key)}: ${m.x}`);
    if (c.key.threshold != null) assert.equal(m.label, `t=${c.key.threshold}`);
  }
  await page.screenshot({ path: `${SHOTS}-series-pareto.png`, fullPage: true });
  pass(`${SERIES.file}: Pareto over forward passes, ${marks.length} points at their cells' median forwards, the fast series labelled by threshold`);
  await view(page, 'parity');
  await page.waitForSelector('[data-testid="parity-table"]', { timeout: TIMEOUT });
  const rows = await page.$$eval('[data-testid="parity-row"]', (trs) => trs.map((tr) => tr.textContent));
  const series = new Set(bundle.cells.filter((c) => c.key.sampler !== 'ar_greedy').map((c) => `${c.key.cache}/${c.key.threshold != null}`));
  assert.equal(rows.length, series.size, `one S_parity row per series at B = ${B}, N = ${N}: ${rows}`);
  assert.ok(rows.some((r) => r.includes('prefix+threshold')), `${rows}`);
  await page.screenshot({ path: `${SHOTS}-series-parity.png`, fullPage: true });
  pass(`${SERIES.file}: S_parity has one row per sampler series (${series.size})`);
}

/** Small multiples: latency vs steps at every (N, B) at once, each facet with its shape's medians, shared axes. */
async function checkMultiples(page) {
  const bundle = load(STUDY);
  await page.setViewportSize({ width: 1400, height: 1000 });
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=latency`);
  await waitLoaded(page, STUDY.file);
  await redraw(page, () => page.check('[data-testid="multiples"]'));
  assert.ok(page.url().includes('multiples=1'), `the address keeps the choice: ${page.url()}`);
  const f = await figure(page);
  const byNB = (x, y) => x[1] - y[1] || x[0] - y[0];
  const want = shapes(bundle).sort(byNB);
  assert.deepEqual(f.plot.grid.titles, want.map(([B, N]) => `N = ${N}, B = ${B}`));
  let marks = 0;
  want.forEach(([B, N], k) => {
    const cells = bundle.cells.filter((c) => ok(c) && c.key.batch_size === B && c.key.seq_len === N && c.key.sampler !== 'ar_greedy');
    const got = f.plot.series.filter((s) => (s.facet ?? 0) === k).flatMap((s) => s.marks.map((m) => m.y)).sort((a, b) => a - b);
    const exp = cells.map((c) => median(c.repetitions.map((r) => r.e2e_ms))).sort((a, b) => a - b);
    assert.equal(got.length, exp.length, `N = ${N}, B = ${B}: points`);
    got.forEach((g, i) => assert.ok(close(g, exp[i]), `N = ${N}, B = ${B}: ${g} != ${exp[i]}`));
    marks += got.length;
  });
  assert.equal((await marksPainted(page)).length, marks);
  const [w, h] = await page.$eval(CHART, (c) => [c.clientWidth, c.clientHeight]);
  const rows = Math.ceil(want.length / f.plot.grid.cols);
  assert.ok(rows === 1 || h > 0.56 * w, `${rows} rows of charts get a taller canvas (${w} x ${h})`);
  await page.screenshot({ path: `${SHOTS}-multiples.png`, fullPage: true });
  await page.setViewportSize({ width: 390, height: 900 });
  await page.screenshot({ path: `${SHOTS}-multiples-390.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 1000 });
  pass(`${STUDY.file}: small multiples: ${want.length} facets (every N, B) with their shapes' ${marks} medians, all painted`);
}

async function checkDeepLinkAndCompare(page) {
  // Deep link: bundle, view, filters, options.
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=memory&N=256&mem=reserved`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.drawn === 'true', CHART, { timeout: TIMEOUT });
  assert.equal(await page.getAttribute('[data-testid="tab-memory"]', 'aria-selected'), 'true');
  assert.equal(await page.$eval('[data-testid="filter-N"]', (s) => s.value), '256');
  assert.equal(await page.$eval('[data-testid="memory-metric"]', (s) => s.value), 'reserved');
  const fig = await figure(page);
  assert.match(fig.title, /reserved/);
  assert.deepEqual(fig.plot.panels.flatMap((p) => p.cells.map((c) => fig.plot.y.categories[c.row])).filter((n) => n !== '256'), []);
  pass('a deep link (?bundle&view=memory&N=256&mem=reserved) restores bundle, view, filter and toggle');
  // The address follows the state.
  await redraw(page, () => setFilter(page, 'B', 4));
  assert.ok(page.url().includes('B=4') && page.url().includes('view=memory'), page.url());
  pass(`the address holds the state: ${page.url().replace(BASE, '')}`);

  // Compare two bundles.
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=latency`);
  await waitLoaded(page, STUDY.file);
  // The workspace is rebuilt with both bundles: a new canvas.
  await page.selectOption('[data-testid="compare-select"]', STUDY_B.file);
  await page.waitForSelector('[data-testid="provenance-compare"]', { timeout: TIMEOUT });
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.drawn === 'true', CHART, { timeout: TIMEOUT });
  const f = await figure(page);
  const labels = f.plot.series.map((s) => s.label);
  assert.ok(labels.some((l) => l.startsWith('[A] ')) && labels.some((l) => l.startsWith('[B] ')), labels.join());
  assert.equal(f.plot.refs.length, 2, 'both AR reference lines');
  assert.ok(page.url().includes(`compare=${STUDY_B.file}`));
  await marksPainted(page);
  await page.screenshot({ path: `${SHOTS}-compare.png`, fullPage: true });
  pass(`compare mode overlays ${labels.join(' and ')} with a legend; the address names both`);
  await redraw(page, () => view(page, 'throughput'));
  assert.ok((await figure(page)).plot.series.some((s) => s.alt));
  pass('compare mode: throughput shows both bundles');

  // The two stacks side by side, under the answer's chart: L_e2e A / B per arm and B, computed here from the files
  // (the median over the cells ok in both of the per-cell median ratios).
  await page.goto(`${BASE}?bundle=${STUDY.file}&compare=${STUDY_B.file}&view=answer`);
  await page.waitForSelector('[data-testid="stacks-panel"]', { timeout: TIMEOUT });
  const [sa, sb] = [load(STUDY), load(STUDY_B)];
  const key = (c) => JSON.stringify(c.key);
  const e2e = (c) => median(c.repetitions.map((r) => r.e2e_ms));
  const shared = sa.cells.filter((c) => sb.cells.some((d) => key(d) === key(c)));
  const counts = await page.textContent('[data-testid="stacks-counts"]');
  assert.ok(counts.startsWith(`${shared.length} cells in both bundles (${sa.cells.length - shared.length} only in [A], `), counts);
  const ratios = shared.filter((c) => c.key.sampler === 'ar_greedy' && c.key.batch_size === 1)
    .map((c) => [c, sb.cells.find((d) => key(d) === key(c))])
    .filter(([c, d]) => ok(c) && ok(d))
    .map(([c, d]) => e2e(c) / e2e(d));
  const arms = await page.$$eval('[data-testid="stacks-arm"]', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  const ar1 = arms.find((r) => r[0].startsWith('AR ') && r[1] === '1');
  assert.ok(ar1, JSON.stringify(arms));
  assert.deepEqual([ar1[2], ar1[3]], [String(ratios.length), median(ratios).toFixed(3)]);
  const speedups = await page.$$eval('[data-testid="stacks-speedup"]', (trs) => trs.length);
  assert.ok(speedups > 0, 'speedups at parity under each stack');
  await page.locator('[data-testid="stacks-panel"]').screenshot({ path: `${SHOTS}-stacks.png` });
  await page.screenshot({ path: `${SHOTS}-stacks-page.png`, fullPage: true });
  pass(`two stacks side by side under the answer: AR at B = 1, [A] / [B] = ${ar1[3]} over ${ar1[2]} cells; ${speedups} speedup rows`);
  await view(page, 'parity');
  await page.waitForSelector('[data-testid="parity-table"]', { timeout: TIMEOUT });
  assert.ok(await page.$('[data-testid="stacks-panel"]'), 'the S_parity view has the panel too');
  // No cell in common (another grid): a one-line note, no numbers.
  const canon = (c) => JSON.stringify(Object.keys(c.key).sort().map((f) => [f, c.key[f]]));
  const keys = new Set(sa.cells.map(canon));
  const other = BUNDLES.find((b) => load(b).cells.every((c) => !keys.has(canon(c))));
  if (other) {
    await page.goto(`${BASE}?bundle=${STUDY.file}&compare=${other.file}&view=answer`);
    const note = await page.waitForSelector('[data-testid="stacks-note"]', { timeout: TIMEOUT });
    assert.match(await note.textContent(), /^No cell is in both bundles \(\d+ cells only in \[A\], \d+ only in \[B\]\)/);
    assert.equal(await page.$('[data-testid="stacks-panel"]'), null);
    pass(`${STUDY.file} against ${other.file} (no cell in common): a one-line note, no table`);
  }
  // One bundle: no panel.
  await page.goto(`${BASE}?bundle=${STUDY.file}&view=answer`);
  await waitLoaded(page, STUDY.file);
  assert.equal(await page.$('[data-testid="stacks-panel"]'), null);
  assert.equal(await page.$('[data-testid="stacks-note"]'), null);
  pass('the S_parity view shows the two stacks too; one bundle shows none');
}

async function checkBroken(page) {
  for (const [file, re] of Object.entries(BROKEN)) {
    await page.goto(`${BASE}?bundle=${encodeURIComponent(file)}`);
    const err = await page.waitForSelector('[data-testid="error"]', { timeout: TIMEOUT });
    const text = await err.textContent();
    assert.match(text, new RegExp(re), `${file}: message`);
    // Each says what to do: the fix `dllm-bench validate` prints for its kind; a missing file, where to look.
    if (file === 'does-not-exist.json') {
      assert.ok(text.includes('not in the results folder; choose a bundle above, or check the file name in the link'), text);
    } else if (!file.includes('/')) {
      assert.match(text, /fix: /, `${file}: no fix in "${text}"`);
    }
    assert.equal(await page.$(`${CHART}[data-drawn="true"]`), null, `${file}: a chart is still shown`);
    pass(`${file}: "${text.slice(0, 100)}${text.length > 100 ? '…' : ''}"`);
  }
  await page.screenshot({ path: `${SHOTS}-error.png`, fullPage: true });
  // Recover by picking a good bundle from the list.
  await page.selectOption('[data-testid="bundle-select"]', BUNDLES[0].file);
  await waitLoaded(page, BUNDLES[0].file);
  assert.equal(await page.$('[data-testid="error"]'), null);
  pass(`after ${Object.keys(BROKEN).length} malformed bundles, picking one from the list draws again`);
  // A broken compared bundle leaves the main one working.
  await page.goto(`${BASE}?bundle=${STUDY.file}&compare=${Object.keys(BROKEN)[0]}`);
  await page.waitForSelector('[data-testid="compare-error"]', { timeout: TIMEOUT });
  await waitLoaded(page, STUDY.file);
  pass('a broken compared bundle shows its message while the main bundle is drawn');
}

/**
 * A bundle of a run stopped while its evaluators scored (scripts/e2e-browser.sh writes it): every cell is there,
 * so only its continuations tell that it is partial; the wasm reads which cells have them (without their texts).
 */
async function checkStoppedWhileScoring(page) {
  const file = 'stopped-scoring.json';
  await page.goto(`${BASE}?bundle=${file}`);
  await waitLoaded(page, file);
  const badge = await page.waitForSelector('[data-testid="partial-badge"]', { timeout: TIMEOUT });
  const text = await badge.textContent();
  assert.match(text, /PARTIAL: \d+ of \d+ planned cells, the continuations of \d+ not yet scored by every evaluator/, text);
  pass(`${file}: "${text}"`);
}

async function checkLocalFiles(page) {
  await page.goto(`${BASE}?bundle=${STUDY.file}`);
  await waitLoaded(page, STUDY.file);
  const input = '[data-testid="file-input"]';
  await page.setInputFiles(input, { name: 'mine.json', mimeType: 'application/json', buffer: Buffer.from('[1, 2') });
  await page.waitForSelector('[data-testid="file-error"]', { timeout: TIMEOUT });
  assert.match(await page.textContent('[data-testid="file-error"]'), /mine\.json.*not a valid JSON.*the bundle on view is kept/);
  await waitLoaded(page, STUDY.file);
  await page.click('[data-testid="file-error-dismiss"]');
  assert.equal(await page.$('[data-testid="file-error"]'), null, 'Dismiss removes the error');
  pass('a broken local file gives an error naming it, and the bundle on view stays');
  const disabled = await page.$eval('[data-testid="compare-select"]',
    (s, f) => [...s.options].filter((o) => o.disabled).map((o) => o.value), STUDY.file);
  assert.deepEqual(disabled, [STUDY.file], 'the compare list disables the bundle on view, and only it');
  pass('"Compare with" cannot pick the bundle on view');
  const evil = load(BUNDLES[0]);
  evil.provenance.host = '<img id="xss" src="x" onerror="window.__xss=1">';
  await page.setInputFiles(input, { name: 'evil.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(evil)) });
  await waitLoaded(page, 'evil.json');
  assert.equal(await page.$('#xss'), null, 'a bundle string was rendered as HTML');
  assert.ok((await page.textContent('[data-testid="provenance"]')).includes(evil.provenance.host));
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  pass('a local bundle loads through the picker; its strings are shown as text, not HTML');
  // Drag and drop.
  const text = readFileSync(STUDY_B.path, 'utf8');
  const dt = await page.evaluateHandle((t) => {
    const d = new DataTransfer();
    d.items.add(new File([t], 'dropped.json', { type: 'application/json' }));
    return d;
  }, text);
  await page.dispatchEvent('[data-testid="drop-zone"]', 'drop', { dataTransfer: dt });
  await waitLoaded(page, 'dropped.json');
  pass('dropping a bundle file on the page loads it');
  // No quality in a bundle: the quality views say so.
  await page.selectOption('[data-testid="bundle-select"]', NO_QUALITY.file);
  await waitLoaded(page, NO_QUALITY.file);
  await view(page, 'pareto');
  const msg = await (await page.waitForSelector('[data-testid="no-quality"]', { timeout: TIMEOUT })).textContent();
  assert.match(msg, /No quality measured in this bundle/);
  await page.screenshot({ path: `${SHOTS}-no-quality.png`, fullPage: true });
  await view(page, 'parity');
  await page.waitForSelector('[data-testid="no-quality"]', { timeout: TIMEOUT });
  pass(`${NO_QUALITY.file}: Pareto and S_parity say "No quality measured in this bundle"`);
}

// A fresh temporary profile: launchPersistentContext instead of launch() so the path is ours to remove.
const profile = mkdtempSync(join(tmpdir(), 'dllm-e2e-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 1000 },
  deviceScaleFactor: DPR,
  acceptDownloads: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => m.type() === 'error' && console.log(`  [console.error] ${m.text()}`));
  // Nothing but our server may be contacted (data: and blob: URLs are the downloads).
  await page.route('**/*', (route) => {
    const u = route.request().url();
    return u.startsWith(BASE) || u.startsWith('data:') || u.startsWith('blob:') ? route.continue() : route.abort();
  });

  await page.goto(BASE);
  await page.waitForFunction(
    (files) => files.every((f) => document.querySelector(`[data-testid="bundle-select"] option[value="${f}"]`)),
    BUNDLES.map((b) => b.file), { timeout: TIMEOUT });
  // The index's first entry (`dllm-bench serve` orders its index itself, newest first).
  const firstListed = await page.$eval('[data-testid="bundle-select"] option:nth-child(2)', (o) => o.value);
  await waitLoaded(page, firstListed);
  pass(`the index lists ${BUNDLES.length} bundles; the first (${firstListed}) loads and draws without a click`);
  // No two entries read the same (the schema's demo runs share a title: their file names tell them apart).
  const optionTexts = await page.$$eval('[data-testid="bundle-select"] option', (os) => os.map((o) => o.textContent));
  assert.equal(new Set(optionTexts).size, optionTexts.length, `duplicate bundle labels: ${optionTexts.join(' | ')}`);
  pass('every bundle in the selector reads differently');
  for (const b of BUNDLES) {
    await page.selectOption('[data-testid="bundle-select"]', b.file);
    await waitLoaded(page, b.file);
    await checkLatency(page, b);
  }
  await page.screenshot({ path: SCREENSHOT, fullPage: true });
  await checkViews(page);
  await checkUnpaintedFails(context);
  await checkRoofline(page);
  await checkAnswer(page);
  await checkSeries(page);
  await checkMultiples(page);
  await checkDeepLinkAndCompare(page);
  await checkBroken(page);
  await checkStoppedWhileScoring(page);
  await checkLocalFiles(page);
  await checkAboveTheFold(page);
  await checkHistory(page);
  await checkPhone(page);
  await checkEnergy(page);
  // A narrow screen still works (responsive layout).
  await page.setViewportSize({ width: 420, height: 900 });
  await page.goto(`${BASE}?bundle=${STUDY.file}`);
  await waitLoaded(page, STUDY.file);
  const width = await page.$eval(CHART, (c) => c.clientWidth);
  assert.ok(width <= 420, `canvas ${width}px wide on a 420px screen`);
  await page.screenshot({ path: `${SHOTS}-narrow.png`, fullPage: true });
  pass(`narrow screen: the chart fits (${width} px)`);
  // On a phone no view makes the page scroll sideways (wide tables scroll in their own box).
  await page.setViewportSize({ width: 390, height: 844 });
  for (const v of ['answer', 'latency', 'pareto', 'parity', 'quality', 'throughput', 'memory', 'ttft-itl', 'step-time', 'roofline', 'details']) {
    await view(page, v);
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(wide <= 390, `${v} at 390 px: the page is ${wide} px wide`);
  }
  pass('a phone (390 px): no view is wider than the screen');

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
