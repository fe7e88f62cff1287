// openetw Event Viewer: the page. Plain JavaScript, no libraries. Every value from an event is
// put into the page with textContent (never as markup), and the server's Content-Security-Policy
// allows only this file as script.
"use strict";

(function () {
  const ROW_H = 20;            // px per table row
  const BLOCK = 100;           // rows fetched at a time
  const MAX_BLOCKS = 6;        // blocks kept (the page never holds more than this many rows x BLOCK)
  const OVERSCAN = 10;
  const FACET_NAMES = {level: "Level", provider: "Source", event: "Event", task: "Task", opcode: "Opcode",
                       keyword: "Keywords", process: "Process", channel: "Log", user: "User"};
  const ALL_COLUMNS = [
    ["levelName", "Level", 90], ["time", "Date and Time", 230], ["provider", "Source", 220], ["id", "Event ID", 70],
    ["event", "Event", 160], ["task", "Task", 50], ["opcode", "Opcode", 55], ["keywords", "Keywords", 140],
    ["pid", "Process", 60], ["tid", "Thread", 60], ["cpu", "CPU", 40], ["channel", "Log", 100], ["user", "User", 120],
    ["computer", "Computer", 120], ["message", "Message", 600],
  ];
  const $ = (id) => document.getElementById(id);
  const LIVE_REFRESH_MS = 1000;  // facets and timeline of a tailed session are redrawn at most this often

  // The session's CSRF token: handed over once in the URL's fragment (never sent to a server),
  // then kept in this origin's storage, which a page on another port cannot read.
  const CSRF = (() => {
    const found = /(?:^#|&)csrf=([A-Za-z0-9]+)/.exec(location.hash);
    try {
      if (found) localStorage.setItem("openetw-csrf", found[1]);
      if (found) history.replaceState(null, "", location.pathname + location.search);
      return found ? found[1] : (localStorage.getItem("openetw-csrf") || "");
    } catch (error) { return found ? found[1] : ""; }
  })();

  const state = {
    sources: [], source: null, wanted: {}, q: "", xpath: "", start: null, end: null,
    total: 0, events: 0, generation: 0, blocks: new Map(), pending: new Set(),
    columns: ["levelName", "time", "provider", "id", "event", "task", "message"], fieldColumns: [],
    selected: null, target: null, tail: null, cursor: 0, paused: false, hist: null, by: "level", liveTimer: null, openFacets: new Set(["level", "provider"]),
    stats: {tailReceived: 0, tailInOrder: true, lastTailRow: -1, lastTailTime: "", tailArrivals: []},
  };
  window.__viewer = {
    state,
    renderedRows: () => document.querySelectorAll("#rows .row").length,
    cachedRows: () => { let n = 0; state.blocks.forEach((b) => { n += b.rows.length; }); return n; },
    idle: () => state.pending.size === 0,
  };

  // -- helpers ---------------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else if (key === "title") node.title = value;
      else node[key] = value;
    }
    for (const child of children) node.append(child);
    return node;
  }

  function params(extra) {
    const p = new URLSearchParams();
    for (const [name, values] of Object.entries(state.wanted)) {
      if (values.size) p.set(name, [...values].join(","));
    }
    if (state.q) p.set("q", state.q);
    if (state.xpath) p.set("xpath", state.xpath);
    if (state.start !== null) p.set("start", state.start);
    if (state.end !== null) p.set("end", state.end);
    for (const [k, v] of Object.entries(extra || {})) p.set(k, v);
    return p.toString();
  }

  async function api(path, options) {
    const given = Object.assign({credentials: "same-origin"}, options || {});
    given.headers = Object.assign({"X-OpenETW-CSRF": CSRF}, given.headers || {});
    if (given.body !== undefined) given.headers["Content-Type"] = "application/json";
    const response = await fetch(path, given);
    const text = await response.text();
    let body;
    try { body = JSON.parse(text); } catch (error) { body = {error: text.trim() || `HTTP ${response.status}`}; }
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    return body;
  }

  function setStatus(text, bad) {
    const status = $("status");
    status.textContent = text;
    status.classList.toggle("bad", !!bad);
  }

  // -- sources tree ----------------------------------------------------------------------------
  async function loadSources() {
    const [listed, sessions, logs] = await Promise.all([api("/api/sources"), api("/api/sessions").catch(() => ({sessions: []})),
      api("/api/logs").catch(() => ({logs: []}))]);
    state.sources = listed.sources;
    const tree = $("tree");
    tree.replaceChildren();
    const sourceItem = (source) => {
      const item = el("li", {class: "source", "data-source": source.id, text: source.name, title: source.error || source.name});
      if (state.source && state.source.id === source.id) item.classList.add("on");
      if (source.error) item.classList.add("failed");
      item.addEventListener("click", () => selectSource(source.id));
      return item;
    };
    const closable = (item, source) => {
      const close = el("button", {type: "button", class: "close", "data-close": source.id, title: `Close ${source.name}`, text: "×"});
      close.addEventListener("click", (e) => { e.stopPropagation(); closeSource(source.id); });
      item.append(close);
      return item;
    };
    // Event Viewer's tree: Windows Logs, then Applications and Services Logs by provider folder
    for (const group of ["Windows Logs", "Applications and Services Logs"]) {
      const list = el("ul");
      const folders = new Map();
      for (const log of (logs.logs || []).filter((l) => l.group === group)) {
        const opened = state.sources.find((s) => s.kind === "log" && s.name === log.name);
        const label = log.folder ? log.name.slice(log.folder.length + 1) : log.name;
        const item = opened ? sourceItem(opened) : el("li", {class: "log", text: label, title: log.name});
        item.textContent = label;
        item.dataset.log = log.name;
        if (log.records !== null) item.append(el("span", {class: "count", text: ` (${log.records})`}));
        if (!opened) item.addEventListener("click", () => openLog(log.name, log.directory));
        if (log.folder) {
          if (!folders.has(log.folder)) {
            const sub = el("ul");
            folders.set(log.folder, sub);
            list.append(el("li", {class: "folder", "data-folder": log.folder}, el("span", {text: log.folder}), sub));
          }
          folders.get(log.folder).append(item);
        } else list.append(item);
      }
      tree.append(el("div", {class: "group", text: group}), list);
    }
    const groups = [["Files", (s) => s.kind === "etl" || s.kind === "evtx"], ["Live Sessions", (s) => s.kind === "session"]];
    for (const [title, test] of groups) {
      const list = el("ul");
      for (const source of state.sources.filter(test)) list.append(closable(sourceItem(source), source));
      if (title === "Live Sessions") {
        for (const session of sessions.sessions || []) {
          if (state.sources.some((s) => s.kind === "session" && s.name === session.name)) continue;
          const item = el("li", {class: "session", "data-session": session.name, text: `${session.name} (attach)`});
          item.addEventListener("click", () => attach(session.name));
          list.append(item);
        }
      }
      tree.append(el("div", {class: "group", text: title}), list);
    }
  }

  async function closeSource(id) {
    try {
      await api(`/api/s/${id}/close`, {method: "POST", body: "{}"});
      if (state.source && state.source.id === id) { clearSource(); state.source = null; }
      await loadSources();
    } catch (error) { setStatus(String(error.message), true); }
  }

  async function openLog(name, directory) {
    try {
      const info = await api("/api/logs/open", {method: "POST", body: JSON.stringify({name, directory})});
      await loadSources();
      await selectSource(info.id);
    } catch (error) { setStatus(String(error.message), true); }
  }

  async function attach(name) {
    try {
      const info = await api("/api/attach", {method: "POST", body: JSON.stringify({session: name})});
      await loadSources();
      await selectSource(info.id);
    } catch (error) { setStatus(String(error.message), true); }
  }

  async function openPath(path) {
    try {
      const info = await api("/api/open", {method: "POST", body: JSON.stringify({path})});
      await loadSources();
      await selectSource(info.id);
    } catch (error) { setStatus(String(error.message), true); }
  }

  async function waitReady(id) {
    for (;;) {
      const info = await api(`/api/s/${id}`);
      if (info.error) throw new Error(info.error);
      if (info.ready) return info;
      setStatus(`Indexing ${info.name}: ${Math.round(info.progress * 100)}%`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  // Nothing of the previous source stays: its rows, its opened event, the row "Go to row" marked.
  function clearSource() {
    stopTail();
    state.generation += 1;
    state.blocks.clear(); state.pending.clear();
    state.total = 0; state.events = 0; state.selected = null; state.target = null; state.hist = null; state.cursor = 0;
    $("viewport").scrollTop = 0;
    $("spacer").style.height = "0px";
    $("rows").replaceChildren();
    $("goto").value = "";
    delete $("detail").dataset.row;
    $("detail").dataset.source = "";
    $("detail-message").textContent = "";
    $("detail-summary").replaceChildren();
    $("detail-fields").replaceChildren();
    $("detail-xml").textContent = "";
    $("facets").replaceChildren();
    drawTimeline();
  }

  async function selectSource(id) {
    clearSource();
    state.source = state.sources.find((s) => s.id === id) || null;
    state.wanted = {}; state.q = ""; state.xpath = ""; state.start = null; state.end = null; state.selected = null;
    $("search").value = ""; $("xpath").value = ""; $("range-from").value = ""; $("range-to").value = "";
    const range = $("range");
    range.dataset.start = ""; range.dataset.end = "";
    showRangeError(null, null);
    document.querySelectorAll("#tree li").forEach((li) => li.classList.toggle("on", li.dataset.source === id));
    try {
      const info = await waitReady(id);
      state.source = info;
      $("pause").hidden = !info.live;
      showLost(info);
      await refresh();
    } catch (error) { setStatus(String(error.message), true); }
  }

  function showLost(info) {
    const lost = $("lost");
    lost.textContent = `Events lost: ${info.events_lost}  ·  Buffers lost: ${info.buffers_lost}`;
    lost.dataset.eventsLost = info.events_lost;
    lost.dataset.buffersLost = info.buffers_lost;
    lost.classList.toggle("bad", info.events_lost > 0 || info.buffers_lost > 0);
  }

  // -- the query: table, facets, timeline ------------------------------------------------------
  async function refresh() {
    if (!state.source) return;
    state.generation += 1;
    state.blocks.clear();
    state.pending.clear();
    const generation = state.generation;
    const key = `refresh:${generation}`;  // an older refresh ending must not clear this one's mark
    state.pending.add(key);
    try {
      const first = await api(`/api/s/${state.source.id}/rows?${params({offset: 0, limit: BLOCK})}`);
      if (generation !== state.generation) return;
      state.total = first.total; state.events = first.events;
      state.blocks.set(0, {rows: first.rows, used: performance.now()});
      $("spacer").style.height = `${state.total * ROW_H}px`;
      renderStatus();
      renderRows();
      if (state.source.live && !state.paused) {
        state.cursor = first.events;  // the tail goes on from the events this query counted
        startTail();
      }
      await Promise.all([loadFacets(generation), loadTimeline(generation)]);
    } catch (error) {
      setStatus(String(error.message), true);
    } finally {
      state.pending.delete(key);
    }
  }

  function renderStatus() {
    const status = $("status");
    status.classList.remove("bad");
    status.dataset.total = state.total;
    status.dataset.events = state.events;
    status.textContent = state.total === state.events ? `${state.events} events` : `${state.total} of ${state.events} events`;
  }

  async function loadFacets(generation) {
    const body = await api(`/api/s/${state.source.id}/facets?${params()}`);
    if (generation !== state.generation) return;
    const box = $("facets");
    box.replaceChildren();
    for (const [name, entries] of Object.entries(body.facets)) {
      if (!entries.length) continue;
      const chosen = state.wanted[name] || new Set();
      const list = el("ul");
      for (const entry of entries.slice(0, 50)) {
        const item = el("li", {class: "facet-value", "data-facet": name, "data-value": String(entry.value), title: entry.label},
          el("span", {class: "label", text: entry.label}), el("span", {class: "count", text: String(entry.count)}));
        if (chosen.has(String(entry.value))) item.classList.add("on");
        item.addEventListener("click", () => toggleFacet(name, String(entry.value)));
        list.append(item);
      }
      const section = el("details", {open: state.openFacets.has(name), "data-facet-name": name},
        el("summary", {text: FACET_NAMES[name] || name}), list);
      section.addEventListener("toggle", () => { if (section.open) state.openFacets.add(name); else state.openFacets.delete(name); });
      box.append(section);
    }
  }

  function toggleFacet(name, value) {
    const set = state.wanted[name] || (state.wanted[name] = new Set());
    if (set.has(value)) set.delete(value); else set.add(value);
    refresh();
  }

  // -- virtual table ---------------------------------------------------------------------------
  function visibleRange() {
    const viewport = $("viewport");
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(state.total, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW_H) + OVERSCAN);
    return [first, last];
  }

  function rowAt(index) {
    const block = state.blocks.get(Math.floor(index / BLOCK));
    if (!block) return null;
    block.used = performance.now();
    return block.rows[index % BLOCK] || null;
  }

  async function fetchBlock(number) {
    const key = `${state.generation}:${number}`;
    if (state.pending.has(key) || state.blocks.has(number)) return;
    state.pending.add(key);
    const generation = state.generation;
    try {
      const body = await api(`/api/s/${state.source.id}/rows?${params({offset: number * BLOCK, limit: BLOCK})}`);
      if (generation !== state.generation) return;
      state.blocks.set(number, {rows: body.rows, used: performance.now()});
      while (state.blocks.size > MAX_BLOCKS) {
        let oldest = null;
        state.blocks.forEach((b, n) => { if (oldest === null || b.used < state.blocks.get(oldest).used) oldest = n; });
        state.blocks.delete(oldest);
      }
      renderRows();
    } catch (error) {
      setStatus(String(error.message), true);
    } finally {
      state.pending.delete(key);
    }
  }

  function cellText(row, column) {
    if (column.startsWith("field:")) return row.fields[column.slice(6)] ?? "";
    return String(row[column] ?? "");
  }

  function columnDefs() {
    const defs = ALL_COLUMNS.filter(([key]) => state.columns.includes(key));
    for (const name of state.fieldColumns) defs.push([`field:${name}`, name, 120]);
    return defs;
  }

  function renderHead() {
    const head = $("thead");
    head.replaceChildren(...columnDefs().map(([key, title]) => el("span", {class: `cell c-${key.replace(":", "-")}`, text: title})));
    for (const [i, [, , width]] of columnDefs().entries()) head.children[i].style.width = `${width}px`;
  }

  function renderRows() {
    const [first, last] = visibleRange();
    const container = $("rows");
    const defs = columnDefs();
    const nodes = [];
    const missing = new Set();
    for (let i = first; i < last; i++) {
      const row = rowAt(i);
      if (!row) { missing.add(Math.floor(i / BLOCK)); continue; }
      const node = el("div", {class: `row level-${row.level}`, "data-row": String(row.row), "data-index": String(i)});
      if (state.selected === row.row) node.classList.add("on");
      if (state.target === i) node.classList.add("target");
      node.style.top = `${i * ROW_H}px`;
      for (const [key, , width] of defs) {
        const cell = el("span", {class: `cell c-${key.replace(":", "-")}`, text: cellText(row, key)});
        cell.style.width = `${width}px`;
        node.append(cell);
      }
      node.addEventListener("click", () => showDetail(row.row));
      nodes.push(node);
    }
    container.replaceChildren(...nodes);
    for (const number of missing) fetchBlock(number);
  }

  let scrollQueued = false;
  function onScroll() {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => { scrollQueued = false; renderRows(); });
  }

  function gotoRow(index) {
    state.target = index;
    const viewport = $("viewport");
    viewport.scrollTop = Math.max(0, Math.min(index, state.total - 1)) * ROW_H;
    renderRows();
  }

  // -- detail pane -----------------------------------------------------------------------------
  async function showDetail(row) {
    state.selected = row;
    document.querySelectorAll("#rows .row").forEach((n) => n.classList.toggle("on", Number(n.dataset.row) === row));
    const source = state.source, generation = state.generation;
    try {
      const event = await api(`/api/s/${source.id}/event/${row}`);
      if (source !== state.source || generation !== state.generation) return;  // another source or query since
      $("detail").dataset.row = String(row);
      $("detail").dataset.source = source.id;
      $("detail-message").textContent = event.message || "";
      const summary = $("detail-summary");
      summary.replaceChildren();
      const facts = [["Log Name", event.channel], ["Source", event.provider], ["Event ID", event.id], ["Event", event.event],
        ["Level", event.levelName], ["Logged", event.time], ["Task", event.task], ["Opcode", event.opcode],
        ["Keywords", event.keywords], ["User", event.user], ["Computer", event.computer], ["Process", `${event.pid}${event.process ? " " + event.process : ""}`],
        ["Thread", event.tid], ["CPU", event.cpu], ["Activity", event.activity]];
      for (const [name, value] of facts) summary.append(el("dt", {text: name}), el("dd", {text: String(value ?? "")}));
      const fields = $("detail-fields");
      fields.replaceChildren(el("tr", {}, el("th", {text: "Name"}), el("th", {text: "Value"})));
      for (const [name, value] of Object.entries(event.fields)) fields.append(el("tr", {}, el("td", {text: name}), el("td", {text: value})));
      $("detail-xml").textContent = event.xml;
    } catch (error) { setStatus(String(error.message), true); }
  }

  function showTab(general) {
    $("tab-general").classList.toggle("on", general);
    $("tab-details").classList.toggle("on", !general);
    $("general").hidden = !general;
    $("details").hidden = general;
  }

  // -- timeline --------------------------------------------------------------------------------
  const PALETTE = {"1": "#8b0000", "2": "#d9342b", "3": "#e8a317", "4": "#3b7dd8", "5": "#8a8a8a", "0": "#5aa469"};
  const SERIES = ["#3b7dd8", "#d9342b", "#5aa469", "#e8a317", "#8e5ac8", "#2bb3b3", "#c8589e", "#7f7f2b", "#555", "#b35c2b", "#2b5cb3", "#999"];

  async function loadTimeline(generation) {
    const canvas = $("timeline");
    const width = Math.max(100, canvas.clientWidth);
    canvas.width = width;
    const bins = Math.max(10, Math.floor(width / 4));
    const hist = await api(`/api/s/${state.source.id}/timeline?${params({bins, by: state.by})}`);
    if (generation !== state.generation) return;
    state.hist = hist;
    drawTimeline();
  }

  function drawTimeline() {
    const canvas = $("timeline");
    const ctx = canvas.getContext("2d");
    const hist = state.hist;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    if (!hist || !hist.series.length) return;
    const totals = new Array(hist.bins).fill(0);
    for (const s of hist.series) s.counts.forEach((c, i) => { totals[i] += c; });
    const peak = Math.max(1, ...totals);
    const barW = canvas.width / hist.bins;
    const base = new Array(hist.bins).fill(0);
    hist.series.forEach((s, n) => {
      ctx.fillStyle = state.by === "level" ? (PALETTE[String(s.value)] || "#777") : SERIES[n % SERIES.length];
      s.counts.forEach((c, i) => {
        if (!c) return;
        const h = (c / peak) * (canvas.height - 4);
        ctx.fillRect(i * barW, canvas.height - base[i] - h, Math.max(1, barW - 1), h);
        base[i] += h;
      });
    });
    const sel = $("timeline-sel");
    if (state.start !== null || state.end !== null) {
      const span = hist.bins * hist.width;
      const x0 = state.start === null ? 0 : Number(BigInt(state.start) - BigInt(hist.start)) / span * canvas.width;
      const x1 = state.end === null ? canvas.width : Number(BigInt(state.end) - BigInt(hist.start)) / span * canvas.width;
      sel.hidden = false;
      sel.style.left = `${Math.max(0, x0)}px`;
      sel.style.width = `${Math.max(1, x1 - x0)}px`;
    } else sel.hidden = true;
  }

  function timelineDrag() {
    const canvas = $("timeline");
    let from = null;
    const xOf = (e) => Math.max(0, Math.min(canvas.width - 1, e.clientX - canvas.getBoundingClientRect().left));
    canvas.addEventListener("mousedown", (e) => { from = xOf(e); });
    window.addEventListener("mouseup", (e) => {
      if (from === null || !state.hist) return;
      const to = xOf(e);
      const hist = state.hist;
      const a = Math.min(from, to), b = Math.max(from, to);
      from = null;
      if (b - a < 2) return;
      const binA = Math.floor((a / canvas.width) * hist.bins), binB = Math.floor((b / canvas.width) * hist.bins);
      // BigInt: FILETIMEs pass 2^53
      const start = BigInt(hist.start) + BigInt(binA) * BigInt(hist.width);
      const end = BigInt(hist.start) + BigInt(binB + 1) * BigInt(hist.width) - 1n;
      setRange(start.toString(), end.toString());
    });
  }

  // The range the drag sets and the From/To boxes set alike: FILETIMEs (strings), inclusive.
  function setRange(start, end) {
    state.start = start; state.end = end;
    const range = $("range");
    range.dataset.start = start ?? ""; range.dataset.end = end ?? "";
    $("range-from").value = start === null ? "" : filetimeIso(start);
    $("range-to").value = end === null ? "" : filetimeIso(end);
    showRangeError(null, null);
    refresh();
  }

  const UNIX_EPOCH_FILETIME = 116444736000000000n;
  const TICKS_PER_SECOND = 10000000n;

  // A FILETIME as the page shows times: ISO 8601 UTC to the 100 ns (2020-07-29T00:07:10.6912345Z).
  function filetimeIso(ft) {
    const ticks = BigInt(ft) - UNIX_EPOCH_FILETIME;
    let seconds = ticks / TICKS_PER_SECOND, fraction = ticks % TICKS_PER_SECOND;
    if (fraction < 0n) { seconds -= 1n; fraction += TICKS_PER_SECOND; }
    const whole = new Date(Number(seconds) * 1000).toISOString().slice(0, 19);
    return `${whole}.${fraction.toString().padStart(7, "0")}Z`;
  }

  // ISO 8601 typed in a box -> FILETIME (BigInt), or an Error saying what is wrong. A time
  // without an offset is UTC; an offset (+02:00) is taken away; seconds and their fraction (to
  // 7 digits: 100 ns) may be left out, as may the whole time of day (midnight).
  const ISO_TYPED = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?\s*(Z|[+-]\d{2}:?\d{2})?$/i;
  function parseIso(text) {
    const m = ISO_TYPED.exec(text);
    if (!m) return new Error(`"${text}" is not an ISO 8601 time such as 2024-05-01T08:00:00.0000000Z`);
    const [year, month, day, hour, minute, second] = [1, 2, 3, 4, 5, 6].map((i) => Number(m[i] || 0));
    const fraction = m[7] || "";
    if (year < 1601) return new Error(`"${text}": times start in 1601 (FILETIME)`);
    if (month < 1 || month > 12) return new Error(`"${text}": no month ${m[2]}`);
    const utc = new Date(0);  // the day, by setUTCFullYear: Date.UTC's years 0-99 rule never comes into it
    utc.setUTCFullYear(year, month - 1, day);
    if (utc.getUTCMonth() !== month - 1 || utc.getUTCDate() !== day) return new Error(`"${text}": no day ${m[3]} in that month`);
    if (hour > 23 || minute > 59 || second > 59) return new Error(`"${text}": no time ${m[4]}:${m[5]}${m[6] ? ":" + m[6] : ""}`);
    if (fraction.length > 7) return new Error(`"${text}": at most 7 digits after the second (100 ns)`);
    let offsetMinutes = 0;
    if (m[8] && m[8].toUpperCase() !== "Z") {
      const digits = m[8].replace(":", "");
      const hours = Number(digits.slice(1, 3)), minutes = Number(digits.slice(3, 5));
      if (hours > 23 || minutes > 59) return new Error(`"${text}": no offset ${m[8]}`);
      offsetMinutes = (digits[0] === "-" ? -1 : 1) * (hours * 60 + minutes);
    }
    const dayTicks = BigInt(Math.round(utc.getTime() / 86400000)) * 86400n * TICKS_PER_SECOND;
    const timeTicks = BigInt(hour * 3600 + minute * 60 + second - offsetMinutes * 60) * TICKS_PER_SECOND;
    return dayTicks + timeTicks + BigInt(fraction.padEnd(7, "0") || "0") + UNIX_EPOCH_FILETIME;
  }

  function showRangeError(box, message) {
    for (const id of ["range-from", "range-to"]) $(id).removeAttribute("aria-invalid");
    const error = $("range-error");
    error.textContent = message || "";
    error.hidden = !message;
    if (box) $(box).setAttribute("aria-invalid", "true");
  }

  // The From/To boxes: both inclusive; an empty box leaves that side open.
  function applyTypedRange() {
    const bounds = [];
    for (const [id, name] of [["range-from", "From"], ["range-to", "To"]]) {
      const text = $(id).value.trim();
      const value = text === "" ? null : parseIso(text);
      if (value instanceof Error) { showRangeError(id, `${name}: ${value.message}`); return; }
      bounds.push(value);
    }
    const [start, end] = bounds;
    if (start !== null && end !== null && start > end) { showRangeError("range-to", "To is before From"); return; }
    const text = (v) => (v === null ? null : v.toString());
    if (text(start) === state.start && text(end) === state.end) { showRangeError(null, null); return; }
    setRange(text(start), text(end));
  }

  // -- live tail -------------------------------------------------------------------------------
  function startTail() {
    stopTail();
    if (!state.source || !state.source.live || state.paused) return;
    const source = new EventSource(`/api/s/${state.source.id}/tail?${params({cursor: state.cursor, csrf: CSRF})}`);
    state.tail = source;
    source.addEventListener("rows", (message) => {
      const body = JSON.parse(message.data);
      state.cursor = body.cursor;
      state.events = body.events;
      showLost(Object.assign({}, state.source, body));
      const viewport = $("viewport");
      const atEnd = viewport.scrollTop + viewport.clientHeight >= state.total * ROW_H - ROW_H;
      for (const row of body.rows) {
        const index = state.total;
        const number = Math.floor(index / BLOCK);
        let block = state.blocks.get(number);
        if (!block) { block = {rows: [], used: performance.now()}; state.blocks.set(number, block); }
        block.rows[index % BLOCK] = row;
        if (row.row <= state.stats.lastTailRow || row.time < state.stats.lastTailTime) state.stats.tailInOrder = false;
        state.stats.lastTailRow = row.row; state.stats.lastTailTime = row.time;
        state.stats.tailReceived += 1;
        state.total += 1;
      }
      if (state.stats.tailArrivals.length < 100000) state.stats.tailArrivals.push([performance.now() + performance.timeOrigin, body.rows.length]);
      while (state.blocks.size > MAX_BLOCKS) {
        let oldest = null;
        state.blocks.forEach((b, n) => { if (oldest === null || b.used < state.blocks.get(oldest).used) oldest = n; });
        state.blocks.delete(oldest);
      }
      $("spacer").style.height = `${state.total * ROW_H}px`;
      renderStatus();
      if (atEnd) viewport.scrollTop = state.total * ROW_H;
      onScroll();  // the table is drawn once per frame however many messages came
      scheduleLiveRefresh();
    });
    source.addEventListener("failed", (message) => {
      setStatus(JSON.parse(message.data).error, true);
      stopTail();
    });
  }

  // While a session is tailed its facets and timeline follow it (at most once a second).
  function scheduleLiveRefresh() {
    if (state.liveTimer) return;
    const generation = state.generation;
    state.liveTimer = setTimeout(async () => {
      state.liveTimer = null;
      if (generation !== state.generation || !state.source || !state.source.live) return;
      const key = `live:${generation}`;
      state.pending.add(key);
      try {
        await Promise.all([loadFacets(generation), loadTimeline(generation)]);
        state.stats.liveRefreshes = (state.stats.liveRefreshes || 0) + 1;
      } catch (error) {
        setStatus(String(error.message), true);
      } finally { state.pending.delete(key); }
    }, LIVE_REFRESH_MS);
  }

  function stopTail() {
    if (state.tail) { state.tail.close(); state.tail = null; }
  }

  function togglePause() {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "Resume" : "Pause";
    $("pause").dataset.paused = String(state.paused);
    if (state.paused) stopTail(); else startTail();
  }

  // -- columns, counts, export -----------------------------------------------------------------
  function buildColumnsMenu() {
    const menu = $("columns-menu");
    menu.replaceChildren();
    for (const [key, title] of ALL_COLUMNS) {
      const box = el("input", {type: "checkbox", checked: state.columns.includes(key), "data-column": key});
      box.addEventListener("change", () => {
        state.columns = box.checked ? [...state.columns, key] : state.columns.filter((c) => c !== key);
        renderHead(); renderRows();
      });
      menu.append(el("label", {}, box, ` ${title}`));
    }
    const field = el("input", {placeholder: "field name", id: "field-column", size: 14});
    const add = el("button", {type: "button", text: "Add field column", id: "add-field-column"});
    add.addEventListener("click", () => {
      const name = field.value.trim();
      if (name && !state.fieldColumns.includes(name)) state.fieldColumns.push(name);
      field.value = ""; renderHead(); renderRows();
    });
    menu.append(el("div", {}, field, add));
  }

  async function showCounts() {
    const box = $("counts");
    if (!box.hidden) { box.hidden = true; return; }
    const body = await api(`/api/s/${state.source.id}/counts`);
    const table = el("table", {class: "fields"}, el("tr", {}, el("th", {text: "Event"}), el("th", {text: "Count"})));
    for (const entry of body.events) table.append(el("tr", {}, el("td", {text: entry.label}), el("td", {text: String(entry.count)})));
    box.replaceChildren(el("div", {class: "group", text: `Providers and events (${body.total} events)`}), table);
    box.hidden = false;
  }

  async function showStacks() {
    const box = $("stacks");
    if (!box.hidden) { box.hidden = true; return; }
    if (!state.source) return;
    setStatus("Joining and naming stacks…");
    let body;
    try { body = await api(`/api/s/${state.source.id}/stacks`); } catch (error) { setStatus(String(error.message), true); return; }
    setStatus("");
    const total = Math.max(1, body.samples);
    // The flame graph: the root at the top, each frame as wide as its inclusive samples.
    const flame = el("div", {class: "flame"});
    let depth = 0;
    const place = (node, level, left) => {
      const width = node.inclusive / total;
      const name = node.name;
      const kind = /!\+0x|^\?!/.test(name) ? "frame unnamed" : (/!.*\./.test(name) ? "frame managed" : "frame");
      const box = el("div", {class: kind, text: name, title: `${name}\n${node.inclusive} samples (${node.inclusive_percent}%), ${node.exclusive} exclusive`});
      box.style.left = `${left * 100}%`; box.style.width = `${width * 100}%`; box.style.top = `${level * 17}px`;
      flame.append(box);
      depth = Math.max(depth, level + 1);
      let offset = left;
      for (const child of node.children) { place(child, level + 1, offset); offset += child.inclusive / total; }
    };
    place(body.tree, 0, 0);
    flame.style.height = `${depth * 17}px`;
    const table = el("table", {class: "fields"}, el("tr", {}, el("th", {text: "Exc"}), el("th", {text: "Exc %"}),
      el("th", {text: "Inc"}), el("th", {text: "Inc %"}), el("th", {text: "Name"})));
    for (const row of body.by_name) {
      table.append(el("tr", {}, el("td", {text: String(row.exclusive)}), el("td", {text: String(row.exclusive_percent)}),
        el("td", {text: String(row.inclusive)}), el("td", {text: String(row.inclusive_percent)}), el("td", {text: row.name})));
    }
    const named = Math.round(body.naming.named_share * 1000) / 10;
    box.replaceChildren(el("div", {class: "group", text: `CPU stacks: ${body.samples} samples, ${named}% of frames named`}), flame,
      el("div", {class: "group", text: "By Name"}), table);
    box.hidden = false;
  }

  function exportFiltered() {
    if (!state.source) return;
    const link = el("a", {href: `/api/s/${state.source.id}/export?${params({format: $("export-format").value, csrf: CSRF})}`});
    link.setAttribute("download", "");
    document.body.append(link);
    link.click();
    link.remove();
  }

  async function search(text) {
    state.q = text;
    if (text && state.source) {
      try {
        for (;;) {  // the text index is built once per source, with progress
          const index = await api(`/api/s/${state.source.id}/text-index`, {method: "POST"});
          if (index.state === "ready") break;
          setStatus(`Building the text index: ${Math.round(index.progress * 100)}%`);
          await new Promise((r) => setTimeout(r, 300));
        }
      } catch (error) { setStatus(String(error.message), true); return; }
    }
    refresh();
  }

  // -- wiring ----------------------------------------------------------------------------------
  function wire() {
    $("viewport").addEventListener("scroll", onScroll);
    $("open-form").addEventListener("submit", (e) => { e.preventDefault(); const p = $("open-path").value.trim(); if (p) openPath(p); });
    $("search").addEventListener("keydown", (e) => { if (e.key === "Enter") search($("search").value.trim()); });
    $("xpath").addEventListener("keydown", (e) => { if (e.key === "Enter") { state.xpath = $("xpath").value.trim(); refresh(); } });
    $("goto").addEventListener("keydown", (e) => { if (e.key === "Enter") gotoRow(Number($("goto").value)); });
    $("clear-range").addEventListener("click", () => setRange(null, null));
    for (const id of ["range-from", "range-to"]) {
      $(id).addEventListener("keydown", (e) => { if (e.key === "Enter") applyTypedRange(); });
      $(id).addEventListener("change", applyTypedRange);
    }
    $("columns-button").addEventListener("click", () => { $("columns-menu").hidden = !$("columns-menu").hidden; });
    $("counts-button").addEventListener("click", showCounts);
    $("stacks-button").addEventListener("click", showStacks);
    $("timeline-by").addEventListener("change", () => { state.by = $("timeline-by").value; loadTimeline(state.generation); });
    $("export").addEventListener("click", exportFiltered);
    $("pause").addEventListener("click", togglePause);
    $("tab-general").addEventListener("click", () => showTab(true));
    $("tab-details").addEventListener("click", () => showTab(false));
    $("friendly-view").addEventListener("change", () => { $("detail-fields").hidden = false; $("detail-xml").hidden = true; });
    $("xml-view").addEventListener("change", () => { $("detail-fields").hidden = true; $("detail-xml").hidden = false; });
    window.addEventListener("resize", () => { renderRows(); if (state.source) loadTimeline(state.generation); });
    timelineDrag();
    buildColumnsMenu();
    renderHead();
  }

  async function start() {
    wire();
    await loadSources();
    const first = state.sources[0];
    if (first) await selectSource(first.id);
    document.body.dataset.ready = "1";
  }

  document.addEventListener("DOMContentLoaded", start);
})();
