// The live page of `ralph-supervise serve`. Everything from a loop goes in with textContent (never as
// markup), live updates come as server-sent events, and actions are POSTs carrying this page's token.
"use strict";

const PAGE_TOKEN = document.querySelector('meta[name="page-token"]').content;
const PAGE = document.body.dataset.page;
const LOOP_ID = document.body.dataset.loop;
const answers = {};     // loop id -> {text, bad}: the supervisor's last answer, kept across re-renders
const confirming = {};  // loop id -> true while "Stop this loop?" is asked
const pending = {};     // loop id -> the action waiting for the supervisor's answer
let lastRows = [];
const names = {};       // loop id -> its name, for the line left when the loop is gone
let current = {row: null, report: null, events: [], gone: false};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

function live(on, text) {
  const span = document.getElementById("live");
  span.textContent = text;
  span.className = on ? "on" : "";
}

function tokens(n) {
  if (n === null || n === undefined) return "?";
  if (n < 1000) return `${n} tok`;
  if (n < 1e6) return `${(n / 1000).toFixed(1)}k tok`;
  return `${(n / 1e6).toFixed(2)}M tok`;
}

function spend(row) {
  const b = row.budgets || {};
  let text = tokens(row.tokens_used);
  if (b.token_budget) text += ` of ${tokens(b.token_budget)}`;
  if (row.cost_usd !== null && row.cost_usd !== undefined) {
    text += ` · $${Number(row.cost_usd).toFixed(2)}`;
    if (b.cost_budget) text += ` of $${Number(b.cost_budget).toFixed(2)}`;
  }
  return text;
}

function sparkline(values) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 300 28");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `files changed in the last ${values.length} iterations`);
  const top = Math.max(1, ...values);
  const w = 300 / Math.max(values.length, 1);
  values.forEach((v, i) => {
    const h = v > 0 ? Math.max(2, (v / top) * 26) : 1;
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", String(i * w + 1));
    rect.setAttribute("y", String(28 - h));
    rect.setAttribute("width", String(Math.max(1, w - 2)));
    rect.setAttribute("height", String(h));
    svg.append(rect);
  });
  return svg;
}

async function act(row, action) {
  confirming[row.id] = false;
  pending[row.id] = action;
  answers[row.id] = {text: `${action}: asking the supervisor…`, bad: false};
  rerender();
  let text, bad;
  try {
    const res = await fetch(`/api/loop/${encodeURIComponent(row.id)}/${action}`, {
      method: "POST", credentials: "same-origin", headers: {"X-Page-Token": PAGE_TOKEN},
    });
    const type = res.headers.get("Content-Type") || "";
    const body = type.includes("json") ? await res.json() : {error: (await res.text()).trim()};
    bad = !res.ok || !body.ok;
    text = `${action}: ${bad ? (body.error || res.statusText) : body.message}`;
  } catch (err) {
    bad = true;
    text = `${action}: no answer from serve (${err})`;
  }
  delete pending[row.id];
  answers[row.id] = {text, bad};
  rerender();
}

function actions(row) {
  const waiting = Boolean(pending[row.id]);
  const busy = waiting || row.ended;   // an ended loop has no supervisor to ask; reset works without one
  const box = el("div", {class: "actions"});
  const button = (action, label, cls, off) => el("button", {
    type: "button", class: cls, disabled: off, "data-action": action,
    onclick: () => act(row, action)}, label);
  box.append(button("pause", "Pause", null, busy), button("resume", "Resume", null, busy),
             button("reset", "Reset", null, waiting));
  box.append(el("button", {type: "button", class: "danger", disabled: busy, "data-action": "stop",
    onclick: () => { confirming[row.id] = true; rerender(); }}, "Stop…"));
  const wrap = el("div", {}, box);
  if (confirming[row.id]) {
    wrap.append(el("div", {class: "confirm"},
      el("span", {text: "Stop this loop? Its whole tree is ended and the supervisor exits."}),
      el("button", {type: "button", class: "danger", "data-action": "stop-confirm",
        onclick: () => act(row, "stop")}, "Yes, stop"),
      el("button", {type: "button", onclick: () => { confirming[row.id] = false; rerender(); }}, "Cancel")));
  }
  const answer = answers[row.id];
  if (answer) wrap.append(el("div", {class: answer.bad ? "answer bad" : "answer", "data-answer": row.id,
    text: answer.text}));
  return wrap;
}

function card(row, linked) {
  const title = linked ? el("a", {href: `/loop/${encodeURIComponent(row.id)}`, text: row.name}) : el("span", {text: row.name});
  const head = el("h2", {}, title, el("span", {class: `badge ${row.state}`, "data-state": row.state, text: row.state}));
  if (row.ended) head.append(el("span", {class: "badge ended", "data-ended": row.ended_at ? "ended" : "died",
    text: row.ended_at ? "ended" : "supervisor gone"}));
  const facts = el("dl", {});
  const fact = (name, value) => { if (value !== null && value !== undefined && value !== "") facts.append(el("dt", {text: name}), el("dd", {text: value})); };
  fact("workspace", row.workspace);
  fact("iteration", row.iteration === null ? "?" : row.iteration);
  if (row.trigger && row.trigger !== "none") fact("trigger", row.trigger);
  fact("reason", row.reason);
  fact("spend", spend(row));
  if (row.limit_until) fact("limit wait", `until ${new Date(row.limit_until).toLocaleString()}`);
  if (row.verify) fact("verify", `it${row.verify.iteration}: ${row.verify.passed} passed, ${row.verify.failed} failed, ${row.verify.errors} errors`);
  if (row.ended && !row.ended_at) fact("ended", "its supervisor died without saying so (killed?)");
  if (row.ended) fact("listed", "until ralph-supervise ls --prune");
  fact("note", row.note);
  const node = el("article", {class: "card", "data-loop": row.id}, head, facts);
  if (row.spark && row.spark.length) node.append(sparkline(row.spark));
  if (row.last_reply) node.append(el("div", {class: "muted", text: `last reply (iteration ${row.last_reply.iteration})`}),
                                  el("div", {class: "reply", text: row.last_reply.text}));
  node.append(actions(row));
  return node;
}

// What a card shows, with the page's own state for it: a card is rebuilt only when this changes, so an
// update about another loop never swaps a button away under the finger.
function cardKey(row) {
  return JSON.stringify([row, answers[row.id] || null, Boolean(confirming[row.id]), pending[row.id] || null]);
}

function keyed(make, key) {
  const node = make();
  node.dataset.key = key;
  return node;
}

// Replace `holder`'s content only when `key` differs from what it shows.
function fill(holder, key, make) {
  if (holder.dataset.key === key) return false;
  holder.dataset.key = key;
  holder.replaceChildren(...[].concat(make()).filter(Boolean));
  return true;
}

let lastProblems = [];
function renderList(data) {
  lastRows = data.loops || [];
  if (data.problems) lastProblems = data.problems;
  for (const row of lastRows) names[row.id] = row.name;
  const main = document.getElementById("main");
  if (!document.getElementById("loops")) {
    main.replaceChildren(el("div", {id: "banners"}), el("div", {class: "grid", id: "loops"}));
  }
  const banners = lastProblems.map((problem) => el("p", {class: "banner", text: problem}));
  const listed = new Set(lastRows.map((row) => row.id));
  for (const [id, answer] of Object.entries(answers)) {  // a loop that ended after an action: its last answer stays
    if (!listed.has(id) && !answer.bad) banners.push(el("p", {class: "banner", "data-ended": id, text: `${names[id] || id} has ended. ${answer.text}`}));
  }
  if (!lastRows.length) banners.push(el("p", {class: "muted", text: "No loop is running. Start one with ralph-supervise -- ./loop.sh; it appears here."}));
  document.getElementById("banners").replaceChildren(...banners);
  const grid = document.getElementById("loops");
  const shown = new Map([...grid.children].map((node) => [node.dataset.loop, node]));
  const wanted = lastRows.map((row) => {
    const key = cardKey(row);
    const old = shown.get(row.id);
    if (old && old.dataset.key === key) return old;
    const node = keyed(() => card(row, true), key);
    if (old) old.replaceWith(node);
    return node;
  });
  wanted.forEach((node, i) => { if (grid.children[i] !== node) grid.insertBefore(node, grid.children[i] || null); });
  while (grid.children.length > wanted.length) grid.lastElementChild.remove();
}

let plot = null;
let escalationOpen = false;   // kept across re-renders, like the answers
function drawPlot(container, data) {
  if (plot) { plot.destroy(); plot = null; }
  if (!data || !data.n || !data.n.length) { container.textContent = "No iteration has finished yet."; return; }
  if (typeof uPlot === "undefined") { container.textContent = "The plot library did not load."; return; }
  const width = Math.max(200, container.clientWidth || 300);
  plot = new uPlot({
    width, height: 160,
    scales: {x: {time: false}, y: {range: (u, min, max) => [0, Math.max(1, max)]}},
    axes: [{incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]}, {}],
    series: [{label: "iteration"}, {label: "files changed", stroke: "#4a7fc1", width: 2},
             {label: "errors", stroke: "#c44", width: 2}],
  }, [data.n, data.files, data.errors], container);
}

function section(title, ...children) {
  return el("section", {}, el("h3", {text: title}), ...children);
}

function reportParts(report) {
  if (!report) return [];
  if (report.error) return [el("p", {class: "banner", text: report.error})];
  const parts = [];
  const v = report.verdict || {};
  parts.push(section("Verdict", el("p", {"data-verdict": "", text: v.line || v.status || "?"})));
  parts.push(section("Timeline", el("div", {id: "plot"})));
  if (report.last_reply) parts.push(section(`Last reply (iteration ${report.last_reply.iteration})`, el("div", {class: "reply", text: report.last_reply.text})));
  if (report.decide && report.decide.length) parts.push(section("To decide", el("ul", {}, ...report.decide.map((d) => el("li", {text: d.replace(/^- /, "")})))));
  if (report.errors && report.errors.length) parts.push(section("Errors", el("ul", {}, ...report.errors.map((e) => el("li", {text: `${e.count}× (it${e.first}–${e.last}) ${e.sample || e.signature}`})))));
  if (report.blockers && report.blockers.length) parts.push(section("Blockers", el("ul", {}, ...report.blockers.map((b) => el("li", {text: `${b.count}× ${b.text}`})))));
  const rows = (report.iterations || []).map((r) => el("tr", {}, el("td", {text: r.n}), el("td", {text: r.outcome}),
    el("td", {text: r.files}), el("td", {text: r.errors}), el("td", {text: r.note})));
  parts.push(section("Iterations", el("div", {class: "table-wrap"}, el("table", {},
    el("tr", {}, el("th", {text: "#"}), el("th", {text: "outcome"}), el("th", {text: "files"}), el("th", {text: "errors"}), el("th", {text: "note"})),
    ...rows))));
  if (report.escalation) {
    const details = el("details", {open: escalationOpen}, el("summary", {text: "escalation.md"}),
                       el("pre", {"data-escalation": "", text: report.escalation}));
    details.addEventListener("toggle", () => { escalationOpen = details.open; });
    parts.push(section("Escalation", details));
  }
  return parts;
}

function renderLoop() {
  const {row, report, events, gone} = current;
  const main = document.getElementById("main");
  if (!document.getElementById("loop-card")) {
    main.replaceChildren(el("div", {id: "gone"}), el("div", {id: "loop-card"}), el("p", {id: "links"}),
                         el("div", {id: "report"}), section("Events", el("ul", {class: "events", id: "events"})));
  }
  const ended = row && row.ended_at ? `This loop ended (exit ${row.exit_code ?? "?"}); it stays listed until ralph-supervise ls --prune.` : "";
  fill(document.getElementById("gone"), String(gone) + ended, () =>
    gone ? el("p", {class: "banner", text: "This loop left the registry (ls --prune, or forget)."})
      : ended ? el("p", {class: "banner", "data-ended": "", text: ended}) : []);
  if (row) {
    fill(document.getElementById("loop-card"), cardKey(row), () => card(row, false));
    fill(document.getElementById("links"), JSON.stringify([row.report, row.escalation]), () => [
      row.report ? el("a", {href: `/loop/${encodeURIComponent(row.id)}/report.html`, text: "report.html"}) : "no report.html yet",
      " · ", row.escalation ? el("a", {href: `/loop/${encodeURIComponent(row.id)}/escalation.md`, text: "escalation.md"}) : "no escalation.md"]);
  }
  if (fill(document.getElementById("report"), JSON.stringify(report || null), () => reportParts(report))
      && report && !report.error) {
    drawPlot(document.getElementById("plot"), report.plot);
  }
  const shown = events.slice(-200).reverse();
  fill(document.getElementById("events"), JSON.stringify([events.length, shown.length ? shown[0].ts : ""]), () =>
    shown.map((e) => el("li", {"data-event": e.event, text: `${e.ts || ""} ${e.event}${e.iteration !== undefined ? " it" + e.iteration : ""} ${e.detail || ""}`})));
}

function rerender() {
  if (PAGE === "list") renderList({loops: lastRows});
  else renderLoop();
}

function connect(url, handlers) {
  const source = new EventSource(url);
  source.onopen = () => live(true, "live");
  source.onerror = () => live(false, "reconnecting…");
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (msg) => handler(JSON.parse(msg.data)));
  }
  return source;
}

if (PAGE === "list") {
  connect("/api/stream", {loops: renderList});
} else {
  fetch(`/api/loop/${encodeURIComponent(LOOP_ID)}`, {credentials: "same-origin"})
    .then((res) => res.json())
    .then((data) => { current.row = data.row; current.report = data.report; current.events = data.events || []; renderLoop(); })
    .catch((err) => live(false, `could not load: ${err}`));
  connect(`/api/loop/${encodeURIComponent(LOOP_ID)}/stream`, {
    row: (row) => { current.row = row; renderLoop(); },
    report: (report) => { current.report = report; renderLoop(); },
    events: (list) => { current.events = current.events.concat(list).slice(-200); renderLoop(); },
    gone: () => { current.gone = true; if (current.row) current.row.ended = true; renderLoop(); },
  });
}
