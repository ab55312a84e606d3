// The stompmq dashboard: plain JavaScript over the management API, no build step, nothing
// fetched from outside.  Each view polls its endpoint every REFRESH_MS.
"use strict";

const REFRESH_MS = 2000;
const CHART_POINTS = 60;
const state = { sortKey: "name", sortDesc: false, after: "", queueRows: [], history: {} };

const $ = (sel) => document.querySelector(sel);
// A queue of the default vhost: /api/queues/{vhost}/{name}, each one percent-encoded segment.
const queuePath = (name) => "/api/queues/" + encodeURIComponent("/") + "/" + encodeURIComponent(name);

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function cell(row, value) {
  const td = document.createElement("td");
  if (value instanceof Node) td.appendChild(value); else td.textContent = value ?? "";
  row.appendChild(td);
}

function fillTable(selector, rows, columns) {
  const body = $(selector + " tbody");
  body.replaceChildren(...rows.map((item) => {
    const tr = document.createElement("tr");
    columns.forEach((column) => cell(tr, column(item)));
    return tr;
  }));
}

function fillList(selector, pairs) {
  $(selector).replaceChildren(...pairs.flatMap(([name, value]) => {
    const dt = document.createElement("dt"); dt.textContent = name;
    const dd = document.createElement("dd"); dd.textContent = value;
    return [dt, dd];
  }));
}

const views = {
  async overview() {
    const o = await api("/api/overview");
    fillList("#overview", [
      ["Version", o.version], ["Uptime (s)", o.uptime], ["Store", o.store],
      ["Connections", o.connections], ["Queues in use", o.queues_in_use], ["Exchanges", o.exchanges],
      ["Published", o.totals.published], ["Delivered", o.totals.delivered], ["Acked", o.totals.acked],
      ["Publish/s", o.rates.publish], ["Deliver/s", o.rates.deliver], ["Ack/s", o.rates.ack],
    ]);
  },
  async queues() {
    const page = await api("/api/queues?limit=1000&after=" + encodeURIComponent(state.after));
    state.queueRows = page.items.map((q) => ({ ...q, ...q.rates }));
    state.nextAfter = page.next_after;
    $("#next-page").disabled = !page.next_after;
    $("#prev-page").disabled = !state.after;
    renderQueues();
  },
  async queue(name) {
    const q = await api(queuePath(name));
    $("#queue-name").textContent = q.name;
    fillList("#queue-detail", [
      ["Ready", q.ready], ["Unacked", q.unacked], ["Consumers", q.consumers],
      ["Published", q.published ?? 0], ["Delivered", q.delivered ?? 0], ["Acked", q.acked ?? 0],
      ["Redelivered", q.redelivered ?? 0], ["Dead-lettered", q.dead_lettered ?? 0],
    ]);
    const points = (state.history[name] ||= []);
    points.push([q.rates.publish, q.rates.deliver]);
    if (points.length > CHART_POINTS) points.shift();
    drawChart(points);
  },
  async exchanges() {
    const page = await api("/api/exchanges?limit=1000");
    fillTable("#exchanges", page.items, [
      (e) => e.name, (e) => e.bindings.map((b) => `${b.queue} (${b.weight})`).join(", "), (e) => e.routed,
    ]);
  },
  async connections() {
    const page = await api("/api/connections?limit=1000");
    fillTable("#connections", page.items, [
      (c) => c.id, (c) => c.peer, (c) => c.login, (c) => c.version,
      (c) => new Date(c.since * 1000).toLocaleTimeString(), (c) => c.subscriptions, (c) => c.bytes_in, (c) => c.bytes_out,
    ]);
  },
};

function renderQueues() {
  const filter = $("#filter").value.toLowerCase();
  const { sortKey, sortDesc } = state;
  const rows = state.queueRows
    .filter((q) => q.name.toLowerCase().includes(filter))
    .sort((a, b) => {
      const x = a[sortKey] ?? -1, y = b[sortKey] ?? -1;
      const order = x < y ? -1 : x > y ? 1 : 0;
      return sortDesc ? -order : order;
    });
  fillTable("#queues", rows, [
    (q) => { const a = document.createElement("a"); a.href = "#queue/" + encodeURIComponent(q.name); a.textContent = q.name; return a; },
    (q) => q.ready, (q) => q.unacked, (q) => q.consumers, (q) => q.publish, (q) => q.deliver, (q) => q.ack,
    (q) => q.oldest_age,
  ]);
  document.querySelectorAll("#queues th").forEach((th) => th.classList.toggle("sorted", th.dataset.key === sortKey));
}

function drawChart(points) {
  const canvas = $("#queue-chart");
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const top = Math.max(1, ...points.flat());
  ["#2a7ab0", "#c0392b"].forEach((color, series) => {
    ctx.strokeStyle = color;
    ctx.beginPath();
    points.forEach((p, i) => {
      const x = (i / (CHART_POINTS - 1)) * canvas.width;
      const y = canvas.height - (p[series] / top) * (canvas.height - 10);
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
  });
}

function route() {
  const [view, ...rest] = (location.hash.slice(1) || "overview").split("/");
  const name = decodeURIComponent(rest.join("/"));
  document.querySelectorAll("main > section").forEach((s) => { s.hidden = s.id !== view + "-view"; });
  return () => views[view] ? views[view](name) : views.overview();
}

async function refresh() {
  try {
    await route()();
    $("#status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("#status").textContent = "error: " + e.message;
  }
}

document.querySelectorAll("#queues th[data-key]").forEach((th) => th.addEventListener("click", () => {
  state.sortDesc = state.sortKey === th.dataset.key ? !state.sortDesc : th.dataset.key !== "name";
  state.sortKey = th.dataset.key;
  renderQueues();
}));
$("#filter").addEventListener("input", renderQueues);
$("#next-page").addEventListener("click", () => { state.after = state.nextAfter || ""; refresh(); });
$("#prev-page").addEventListener("click", () => { state.after = ""; refresh(); });
$("#purge").addEventListener("click", async () => {
  const name = $("#queue-name").textContent;
  if (confirm(`Purge every ready message of ${name}?`)) {
    await api(queuePath(name) + "/purge", { method: "POST", headers: { "content-type": "application/json" } });
    refresh();
  }
});
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, REFRESH_MS);
