// leasehold serve: the search page and the status page. No framework, nothing
// fetched from elsewhere; every text from the index is set as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
const PAGE = 20;

async function getJson(url, options) {
  const answer = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
  let body = {};
  try { body = await answer.json(); } catch (e) { body = { error: `${answer.status} ${answer.statusText}` }; }
  if (!answer.ok) throw new Error(body.error || `${answer.status}`);
  return body;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

// ---- the search page ----

const search = { q: "", type: "", folder: "", page: 0, sent: 0, selected: -1, timer: null, pending: null };

function readAddress() {
  const p = new URLSearchParams(location.search);
  search.q = p.get("q") || "";
  search.type = p.get("type") || "";
  search.folder = p.get("folder") || "";
  search.page = Math.max(0, (parseInt(p.get("page") || "1", 10) || 1) - 1);
  $("q").value = search.q;
  $("type").value = search.type;
}

function writeAddress() {
  const p = new URLSearchParams();
  if (search.q) p.set("q", search.q);
  if (search.type) p.set("type", search.type);
  if (search.folder) p.set("folder", search.folder);
  if (search.page > 0) p.set("page", String(search.page + 1));
  const address = p.toString() ? `/?${p}` : "/";
  if (address !== location.pathname + location.search) history.replaceState(null, "", address);
}

function later() {
  clearTimeout(search.timer);
  search.timer = setTimeout(find, 200);
}

async function find() {
  clearTimeout(search.timer);
  writeAddress();
  const mine = ++search.sent;
  // A search the page will not show is stopped: the server drops it unrun.
  if (search.pending) search.pending.abort();
  search.pending = new AbortController();
  if (!search.q.trim()) { show(null); return; }
  const p = new URLSearchParams({ q: search.q, offset: String(search.page * PAGE) });
  if (search.type) p.set("type", search.type);
  if (search.folder) p.set("folder", search.folder);
  try {
    const found = await getJson(`/api/search?${p}`, { signal: search.pending.signal });
    if (mine === search.sent) show(found);
  } catch (e) {
    if (mine === search.sent && e.name !== "AbortError") problem(e.message);
  }
}

function problem(message) {
  $("summary").textContent = message;
  $("summary").className = "error";
  $("hits").replaceChildren();
  $("pager").hidden = true;
}

// The snippet with its matches marked; the highlights are byte offsets into its UTF-8.
function snippet(text, highlights) {
  const bytes = new TextEncoder().encode(text);
  const decode = (a, b) => new TextDecoder().decode(bytes.subarray(a, b));
  const out = el("p", { class: "snippet" });
  let at = 0;
  for (const [start, end] of highlights) {
    if (start < at || end > bytes.length) continue;
    out.append(decode(at, start), el("mark", {}, decode(start, end)));
    at = end;
  }
  out.append(decode(at, bytes.length));
  return out;
}

function hitItem(hit) {
  const name = hit.key.split(/[\\/]/).pop();
  const original = `/doc/original?key=${encodeURIComponent(hit.key)}`;
  const facts = [hit.type && hit.type.toUpperCase(), hit.date, hit.author].filter(Boolean).join(" · ");
  return el("li", { class: "hit" },
    el("a", { class: "title", href: original }, hit.title || name),
    facts ? el("span", { class: "facts" }, facts) : null,
    el("a", { class: "more", href: `/doc/text?key=${encodeURIComponent(hit.key)}` }, "text"),
    el("div", { class: "where" }, hit.location || hit.key),
    snippet(hit.snippet, hit.highlights));
}

function show(found) {
  search.selected = -1;
  $("summary").className = "";
  if (!found) {
    $("summary").textContent = "";
    $("hits").replaceChildren();
    $("pager").hidden = true;
    return;
  }
  // `listed` counts the matches left out for a damaged result too.
  const first = found.offset + 1, last = found.offset + (found.listed ?? found.hits.length);
  $("summary").textContent = found.total === 0
    ? "No document matches."
    : `${found.total} ${found.total === 1 ? "document matches" : "documents match"}` +
      (found.total > found.hits.length && last >= first ? `, ${first}–${last} shown` : "");
  $("hits").replaceChildren(...found.hits.map(hitItem));
  const pages = Math.ceil(found.total / PAGE);
  $("pager").hidden = pages <= 1;
  $("prev").disabled = search.page === 0;
  $("next").disabled = search.page + 1 >= pages;
  $("page-of").textContent = `page ${search.page + 1} of ${pages}`;
}

function select(step) {
  const items = [...document.querySelectorAll("#hits .hit")];
  if (!items.length) return;
  search.selected = Math.max(0, Math.min(items.length - 1, search.selected + step));
  items.forEach((item, i) => item.classList.toggle("selected", i === search.selected));
  items[search.selected].scrollIntoView({ block: "nearest" });
}

async function loadFolders() {
  try {
    const status = await getJson("/api/status");
    const options = status.folders.map((f) => el("option", { value: f }, f));
    $("folder").append(...options);
    if (search.folder) $("folder").value = search.folder;
  } catch (e) { /* the search works without the list */ }
}

function searchPage() {
  readAddress();
  $("search").addEventListener("submit", (e) => { e.preventDefault(); search.page = 0; find(); });
  $("q").addEventListener("input", () => { search.q = $("q").value; search.page = 0; later(); });
  for (const id of ["type", "folder"]) {
    $(id).addEventListener("change", () => { search[id] = $(id).value; search.page = 0; find(); });
  }
  $("prev").addEventListener("click", () => { search.page = Math.max(0, search.page - 1); find(); });
  $("next").addEventListener("click", () => { search.page += 1; find(); });
  document.addEventListener("keydown", (e) => {
    // A list or a button keeps its own keys.
    if (["SELECT", "BUTTON", "A"].includes(e.target.tagName)) return;
    if (e.key === "ArrowDown") { e.preventDefault(); select(1); }
    else if (e.key === "ArrowUp") { e.preventDefault(); select(-1); }
    else if (e.key === "Enter" && search.selected >= 0) {
      e.preventDefault();
      location.href = document.querySelectorAll("#hits .hit .title")[search.selected].href;
    }
  });
  loadFolders();
  $("q").focus();
  if (search.q) find();
}

// ---- the status page ----

const LABELS = [
  ["indexed", "Indexed"], ["no_text", "No text"], ["queued", "Queued"], ["extracting", "Extracting"],
  ["retrying", "Retrying"], ["failed", "Failed"], ["removed", "Removed"],
];

async function retry(key, button) {
  button.disabled = true;
  const note = $("retry-note");
  try {
    await getJson(`/api/retry?key=${encodeURIComponent(key)}`,
      { method: "POST", headers: { [meta("csrf-header")]: meta("csrf") } });
    note.textContent = `Queued again: ${key}`;
  } catch (e) {
    note.textContent = `Not queued: ${key}: ${e.message}`;
  }
  refresh();
}

function failureRow(failure, canRetry) {
  const button = canRetry ? el("button", { type: "button", class: "retry" }, "Retry") : null;
  if (button) button.addEventListener("click", () => retry(failure.key, button));
  return el("tr", { "data-key": failure.key },
    el("td", {}, failure.location || failure.key),
    el("td", { class: "why" }, failure.error || ""),
    el("td", {}, String(failure.attempts)),
    el("td", {}, button));
}

function showStatus(status) {
  $("error").hidden = true;
  const t = status.totals;
  $("totals").replaceChildren(...LABELS.filter(([k]) => t[k] > 0 || ["indexed", "queued", "failed"].includes(k))
    .map(([k, label]) => el("div", { "data-count": k }, el("dt", {}, label), el("dd", {}, t[k].toLocaleString()))));
  // Documents removed from their folder are no part of any run's work.
  const done = t.indexed + t.failed;
  const all = done + t.queued + t.extracting + t.retrying;
  $("progress").max = Math.max(all, 1);
  $("progress").value = done;
  $("progress-text").textContent = all === done
    ? `All ${all.toLocaleString()} documents settled.`
    : `${done.toLocaleString()} of ${all.toLocaleString()} settled; ${(t.queued + t.retrying).toLocaleString()} waiting, ${t.extracting.toLocaleString()} being extracted.`;
  $("folders").replaceChildren(...status.folders.map((f) => el("li", {}, f)));
  $("failures-section").hidden = status.failures.length === 0;
  $("failures-note").textContent = status.failures.length >= status.failures_listed
    ? `The first ${status.failures_listed} are listed; \`leasehold status\` lists them all.` : "";
  $("failures").replaceChildren(...status.failures.map((f) => failureRow(f, status.can_retry)));
}

let polling = false;

async function refresh() {
  if (polling) return;
  polling = true;
  try {
    showStatus(await getJson("/api/status"));
  } catch (e) {
    $("error").textContent = `Cannot read the status: ${e.message}`;
    $("error").hidden = false;
  } finally {
    polling = false;
  }
}

// ---- the status page's charts: the report's figures, drawn here so that
// the time axes are in the reader's local time ----

const SVG_NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#3a6ea5", "#c0504d", "#9bbb59", "#8064a2"];
const W = 720, H = 190, LEFT = 46, RIGHT = 12, TOP = 8, BOTTOM = 24;

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// Round steps for the time axis, from a second to a week.
const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800]
  .map((s) => s * 1000);

// Ticks at a round local-time step, at most seven across the range.
function timeTicks(start, end) {
  const step = STEPS.find((s) => (end - start) / s <= 7) || STEPS[STEPS.length - 1];
  const offset = new Date(start).getTimezoneOffset() * 60000;
  const ticks = [];
  for (let t = Math.ceil((start - offset) / step) * step + offset; t <= end; t += step) ticks.push(t);
  return { ticks, step };
}

function tickLabel(t, step, span) {
  const o = step < 60000 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : step >= 86400000 ? { month: "short", day: "numeric" }
    : span >= 86400000 ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }
    : { hour: "2-digit", minute: "2-digit" };
  return new Intl.DateTimeFormat(undefined, o).format(new Date(t));
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

// Columns (one group per bucket) or a line over time; the legend goes above
// the plot, never on it.
function timeChart(kind, figures, series) {
  const starts = figures.starts, end = figures.end, span = end - starts[0];
  const max = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const x = (t) => LEFT + (W - LEFT - RIGHT) * (t - starts[0]) / span;
  const y = (v) => H - BOTTOM - (H - BOTTOM - TOP) * v / max;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
  for (const v of [0, max / 2, max]) {
    chart.append(svg("line", { class: v ? "grid" : "axis", x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v) }),
      svg("text", { x: LEFT - 6, y: y(v) + 4, "text-anchor": "end" }, v.toLocaleString()));
  }
  const bucket = span / starts.length;
  series.forEach((s, k) => {
    if (kind === "line") {
      const points = s.values.map((v, i) => `${x(starts[i] + bucket / 2).toFixed(1)},${y(v).toFixed(1)}`);
      chart.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: COLOURS[k], "stroke-width": 2 }));
      return;
    }
    const width = (x(starts[0] + bucket) - x(starts[0])) * 0.8 / series.length;
    s.values.forEach((v, i) => {
      if (!v) return;
      const bar = svg("rect", { x: x(starts[i]) + width * k + 1, y: y(v), width: Math.max(width, 1), height: y(0) - y(v), fill: COLOURS[k] });
      bar.append(svg("title", {}, `${s.name}: ${v} from ${tickLabel(starts[i], 1000, span)}`));
      chart.append(bar);
    });
  });
  const { ticks, step } = timeTicks(starts[0], end);
  for (const t of ticks) {
    chart.append(svg("line", { class: "axis", x1: x(t), x2: x(t), y1: H - BOTTOM, y2: H - BOTTOM + 4 }),
      svg("text", { class: "tick", x: x(t), y: H - 6, "text-anchor": "middle" }, tickLabel(t, step, span)));
  }
  return chart;
}

// Horizontal bars, largest first, a label and the value on each row.
function barChart(items, unit) {
  const rows = items.slice(0, 10), row = 22, labelWidth = 260;
  const max = Math.max(...rows.map(([, v]) => v), 0) || 1;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${rows.length * row + 4}`, class: "chart bars", role: "img" });
  rows.forEach(([name, v], i) => {
    const yTop = i * row + 2;
    const shown = name.length > 40 ? `…${name.slice(-39)}` : name;
    const label = svg("text", { x: labelWidth - 8, y: yTop + 14, "text-anchor": "end" }, shown);
    label.append(svg("title", {}, name));
    const width = (W - labelWidth - 90) * v / max;
    chart.append(label, svg("rect", { x: labelWidth, y: yTop + 3, width: Math.max(width, 1), height: row - 8, fill: COLOURS[0] }),
      svg("text", { class: "value", x: labelWidth + width + 6, y: yTop + 14 }, `${v.toLocaleString()}${unit}`));
  });
  return chart;
}

function legend(names) {
  return el("ul", { class: "legend" }, ...names.map((n, k) => el("li", {}, el("span", { class: `swatch c${k}` }), n)));
}

// One chart in its own section, closed and said empty when it has no data.
function chartSection(id, title, hasData, draw) {
  const section = el("details", { id: `chart-${id}` }, el("summary", {}, title, hasData ? null : el("span", { class: "none" }, " — nothing yet")));
  if (hasData) {
    section.open = true;
    section.append(...draw());
  }
  return section;
}

// One history read at a time: on a large history a read may take longer
// than the interval, and reads piled up would hold the handlers.
let drawing = false;
async function drawCharts() {
  if (drawing) return;
  drawing = true;
  let f;
  try { f = await getJson("/api/history"); } catch (e) { return; } finally { drawing = false; }
  const any = (values) => (values || []).some((v) => v > 0);
  const over = !!f.starts.length;
  $("charts").replaceChildren(
    chartSection("throughput", "Documents completed over time", over && any(f.completed),
      () => [timeChart("columns", f, [{ name: "completed", values: f.completed }])]),
    chartSection("queue", "Documents waiting or in work", over && any(f.queue),
      () => [timeChart("line", f, [{ name: "waiting or in work", values: f.queue }])]),
    chartSection("fencing", "Lease takeovers and refused writes", over && (any(f.takeovers) || any(f.refused)),
      () => [legend(["lease takeovers", "refused writes"]),
        timeChart("columns", f, [{ name: "lease takeovers", values: f.takeovers }, { name: "refused writes", values: f.refused }])]),
    chartSection("failures-by-reason", "Failures by reason", over && f.failures_by_reason.length > 0,
      () => [barChart(f.failures_by_reason, "")]),
    chartSection("failures-by-format", "Failures by format", over && f.failures_by_format.length > 0,
      () => [barChart(f.failures_by_format, "")]),
    chartSection("slowest", "Slowest documents (each one's fetch, extraction and write)", over && f.slowest.length > 0,
      () => [barChart(f.slowest.map(([k, v]) => [k, v]), " s")]));
}

function statusPage() {
  refresh();
  drawCharts();
  setInterval(refresh, 1000);
  setInterval(drawCharts, 5000);
}

if (document.body.dataset.page === "search") searchPage(); else statusPage();
