// The stompmq dashboard: plain JavaScript over the management API, no build step, nothing
// fetched from outside.  Each view polls its endpoint every REFRESH_MS; the vhost selector
// picks whose queues and exchanges are shown (remembered by the browser across reloads).
"use strict";

const REFRESH_MS = 2000;
const CHART_HEIGHT = 220;
const JSON_HEADERS = { "content-type": "application/json" };
const state = { sortKey: "name", sortDesc: false, after: "", queueRows: [], charts: {},
                vhost: localStorage.getItem("stompmq.vhost") || "/",
                range: [60, 600, 3600, 28800].find((r) => r === Number(localStorage.getItem("stompmq.range"))) || 3600 };

const $ = (sel) => document.querySelector(sel);
// A queue resource: /api/queues/{vhost}/{name}, each one percent-encoded segment.
const queuePath = (name) => "/api/queues/" + encodeURIComponent(state.vhost) + "/" + encodeURIComponent(name);
// A vhost's list of a kind: /api/{kind}/{vhost}, as RabbitMQ names it.
const listOf = (kind) => `/api/${kind}/` + encodeURIComponent(state.vhost);

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

const post = (path, body) => api(path, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(body ?? {}) });
const put = (path, body) => api(path, { method: "PUT", headers: JSON_HEADERS, body: JSON.stringify(body) });
// "key=value, key=value" as an object (a queue's arguments, a message's headers).
const pairs = (text) => Object.fromEntries(text.split(",").map((pair) => pair.trim()).filter(Boolean)
  .map((pair) => [pair.split("=")[0].trim(), pair.split("=").slice(1).join("=").trim()]));

// "2 h 5 min", "3 d 4 h", "42 s": the two largest units of a number of seconds.
function duration(seconds) {
  if (seconds == null) return "";
  let rest = Math.max(0, Math.floor(seconds));
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]]) {
    const n = Math.floor(rest / size);
    rest %= size;
    if (n || parts.length) parts.push([n, unit]);
  }
  return parts.slice(0, 2).filter(([n]) => n).map(([n, unit]) => `${n} ${unit}`).join(" ") || "0 s";
}

function bytes(n) {
  if (n == null) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function link(href, text) {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  return a;
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

function showAlarms(alarms) {
  const banner = $("#alarm-banner");
  banner.hidden = !alarms.length;
  banner.textContent = alarms.length ? `${alarms.join(" and ")} alarm: publishers blocked` : "";
}

// The counters each broker writes with its lease, in the cluster table's column order.
const CLUSTER_COUNTERS = ["published", "delivered", "acked", "redelivered", "dead_lettered"];

// The brokers sharing the database and their totals; hidden on a store of one broker (no brokers).
function showCluster(cluster) {
  $("#cluster-panel").hidden = !cluster.brokers.length;
  fillTable("#cluster", cluster.brokers, [
    (b) => b.id + (b.this ? " (this)" : ""), (b) => (b.live ? duration(b.lease_remaining) : "lapsed"),
    (b) => (b.renewal_age == null ? "never" : duration(b.renewal_age) + " ago"), (b) => b.epoch,
    (b) => b.claimed, (b) => b.unacked, (b) => b.version ?? "",
    ...CLUSTER_COUNTERS.map((key) => (b) => b.counters[key]),
  ]);
  const total = document.createElement("tr");
  ["Total (live brokers)", "", "", "", "", "", "", ...CLUSTER_COUNTERS.map((key) => cluster.totals?.[key])]
    .forEach((value) => cell(total, value));
  $("#cluster tfoot").replaceChildren(...(cluster.brokers.length ? [total] : []));
}

// Where a queue's (or stream's) effective setting came from (the engine's queue_settings): its
// declaration, a stream's default (the --stream-max-* flags), or the policy or operator policy of
// that name, linked to the policies view that lists it.
function settingSource(setting) {
  if (setting.source === "declaration") return "declared";
  if (setting.source === "default") return "default";
  const shown = document.createDocumentFragment();
  shown.append(setting.source === "operator-policy" ? "operator policy " : "policy ",
               link("#policies", setting.policy));
  return shown;
}

// A stream's retention settings as "max-age=60 (policy keep), ...", each with its source.
function retention(settings) {
  const shown = document.createDocumentFragment();
  Object.entries(settings).forEach(([key, setting], i) => {
    shown.append(`${i ? ", " : ""}${key}=${setting.value} (`, settingSource(setting), ")");
  });
  return shown;
}

// A policy's columns, the same in both tables: its definition as "key=value, key=value".
const POLICY_COLUMNS = [
  (p) => p.name, (p) => p.pattern, (p) => p["apply-to"], (p) => p.priority,
  (p) => Object.entries(p.definition).map(([k, v]) => `${k}=${v}`).join(", "),
];

const views = {
  async overview() {
    const [o, cluster] = await Promise.all([api("/api/overview"), api("/api/cluster")]);
    showAlarms(o.alarms);
    showCluster(cluster);
    fillList("#overview", [
      ["Version", o.version], ["Broker", cluster.brokers.length ? o.broker : "single broker"],
      ["Uptime", duration(o.uptime)], ["Store", o.store], ["Vhosts", o.vhosts],
      ["Connections", o.connections], ["Queues in use", o.queues_in_use], ["Exchanges", o.exchanges],
      ["Published", o.totals.published], ["Delivered", o.totals.delivered], ["Acked", o.totals.acked],
      ["Publish/s", o.rates.publish], ["Deliver/s", o.rates.deliver], ["Ack/s", o.rates.ack],
    ]);
    const n = o.node;
    const limit = (value, what) => (value == null ? `${what} off` : `${what} ${bytes(value)}`);
    fillList("#node", [
      ["Alarms", o.alarms.length ? o.alarms.join(", ") : "none"],
      ["Memory", `${bytes(n.memory_used)} (${limit(n.memory_limit, "watermark")})`],
      ["Disk free", `${bytes(n.disk_free)} (${limit(n.disk_free_limit, "limit")})`],
      ["Store size", bytes(n.store_bytes)],
      ["Open files", n.open_fds ?? "n/a"],
      ["Uptime", duration(o.uptime)],
    ]);
    drawChart("total-chart", "", (await api("/api/history?range=" + state.range)).points);
  },
  async queues() {
    const page = await api(listOf("queues") + "?limit=1000&after=" + encodeURIComponent(state.after));
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
      ["vhost", q.vhost], ["Ready", q.ready], ["Unacked", q.unacked], ["Consumers", q.consumers],
      ["Published", q.published ?? 0], ["Delivered", q.delivered ?? 0], ["Acked", q.acked ?? 0],
      ["Redelivered", q.redelivered ?? 0], ["Dead-lettered", q.dead_lettered ?? 0],
    ]);
    const settings = Object.entries(q.settings);
    $("#settings-empty").hidden = settings.length > 0;
    fillTable("#settings", settings, [([key]) => key, ([, s]) => String(s.value), ([, s]) => settingSource(s)]);
    const consumers = await api(queuePath(name) + "/consumers");
    fillTable("#consumers", consumers.items, [
      (c) => link("#connection/" + encodeURIComponent(c.connection), c.connection), (c) => c.peer, (c) => c.login,
      (c) => c.subscription, (c) => c.ack, (c) => c.prefetch, (c) => c.unacked, (c) => c.priority,
      (c) => c.selector ?? "",
    ]);
    const history = await api(queuePath(name) + "/history?range=" + state.range);
    drawChart("queue-chart", state.vhost + "\n" + name, history.points);
  },
  async exchanges() {
    const page = await api(listOf("exchanges") + "?limit=1000");
    fillTable("#exchanges", page.items, [
      (e) => e.name, (e) => e.type,
      (e) => e.bindings.map((b) => `${b.queue} (${b.weight ?? b.routing_key})`).join(", "), (e) => e.routed,
    ]);
  },
  async policies() {  // the vhost's policies and operator policies, as the queues' settings name them
    const [policies, operator] = await Promise.all([
      api(listOf("policies")), api(listOf("operator-policies"))]);
    fillTable("#policies", policies.items, POLICY_COLUMNS);
    fillTable("#operator-policies", operator.items, POLICY_COLUMNS);
  },
  async streams() {  // a consumer group's lag in entries, and how long its oldest unread entry has waited
    const page = await api(listOf("streams") + "?limit=1000");
    fillTable("#streams", page.items, [
      (s) => s.name, (s) => s.first_offset, (s) => s.next_offset, (s) => bytes(s.bytes), (s) => s.subscribers,
      (s) => retention(s.settings),
      (s) => s.groups.map((g) => `${g.name}: ${g.lag} (${duration(g.lag_seconds)})`).join(", "),
    ]);
  },
  async schedules() {  // the first 1000, the next to fire first
    const page = await api(`/api/schedules/${encodeURIComponent(state.vhost)}?limit=1000`);
    fillTable("#schedules", page.items, [
      (s) => s.id, (s) => link("#queue/" + encodeURIComponent(s.queue), s.queue), (s) => s.next.replace("T", " "),
      (s) => duration((s.next_at - Date.now()) / 1000), (s) => s.remaining ?? "no end",
      (s) => s.cron ?? (s.period ? duration(s.period / 1000) : ""), (s) => cancelButton(s),
    ]);
  },
  async connections() {
    const page = await api("/api/connections?limit=1000");
    fillTable("#connections", page.items, [
      (c) => link("#connection/" + encodeURIComponent(c.id), c.id), (c) => c.peer, (c) => c.login, (c) => c.vhost,
      (c) => c.version, (c) => duration(Date.now() / 1000 - c.since), (c) => c.subscriptions,
      (c) => bytes(c.bytes_in), (c) => bytes(c.bytes_out),
    ]);
  },
  async users() {  // the users file's users, administrators only (409 without a users file)
    const response = await fetch("/api/users");
    const answer = await response.json();
    const disabled = response.status === 409 || response.status === 403;
    $("#users-note").textContent = disabled ? answer.error : "";
    $("#add-user-form").hidden = disabled;
    if (!response.ok) {
      fillTable("#users", [], []);
      if (!disabled) throw new Error(answer.error || response.statusText);
      return;
    }
    const { items } = await api("/api/permissions");
    fillTable("#users", answer.items, [
      (u) => u.name, (u) => u.tags.join(", "),
      (u) => items.filter((p) => p.user === u.name).map((p) => `${p.vhost}: ${p.configure} / ${p.write} / ${p.read}`)
        .join("; "),
    ]);
  },
  async connection(id) {
    const c = await api("/api/connections/" + encodeURIComponent(id));
    $("#connection-name").textContent = `Connection ${c.id}`;
    fillList("#connection-detail", [
      ["Peer", c.peer], ["Login", c.login ?? ""], ["vhost", c.vhost ?? ""], ["STOMP", c.version ?? ""],
      ["Connected for", duration(Date.now() / 1000 - c.since)], ["Blocked by an alarm", c.held ? "yes" : "no"],
      ["Bytes in", `${bytes(c.bytes_in)} (${bytes(c.rates.bytes_in)}/s)`],
      ["Bytes out", `${bytes(c.bytes_out)} (${bytes(c.rates.bytes_out)}/s)`],
      ["Frames in", `${c.frames_in} (${c.rates.frames_in}/s)`],
    ]);
    fillTable("#subscriptions", c.subscriptions, [
      (s) => s.id, (s) => s.destination,
      (s) => (s.queue == null ? "" : link("#queue/" + encodeURIComponent(s.queue), s.queue)),
      (s) => s.ack, (s) => s.prefetch, (s) => s.unacked, (s) => s.selector ?? "",
    ]);
  },
};

function cancelButton(schedule) {
  const button = document.createElement("button");
  button.className = "danger";
  button.textContent = "Cancel";
  button.addEventListener("click", () => act(`Cancel schedule ${schedule.id} of ${schedule.queue}?`, () =>
    api(`/api/schedules/${encodeURIComponent(state.vhost)}/${encodeURIComponent(schedule.id)}`,
        { method: "DELETE", headers: JSON_HEADERS })));
  return button;
}

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
    (q) => link("#queue/" + encodeURIComponent(q.name), q.name),
    (q) => q.ready, (q) => q.unacked, (q) => q.consumers, (q) => q.publish, (q) => q.deliver, (q) => q.ack,
    (q) => q.oldest_ready_age, (q) => q.oldest_unacked_age,
  ]);
  document.querySelectorAll("#queues th").forEach((th) => th.classList.toggle("sorted", th.dataset.key === sortKey));
}

// A uPlot chart of rates (points of [time, publish/s, deliver/s, ack/s]) in element ``id``;
// made once per subject (the totals, a queue), then given new data on every refresh.
function drawChart(id, subject, points) {
  const element = document.getElementById(id);
  const data = [0, 1, 2, 3].map((i) => points.map((p) => p[i]));
  const existing = state.charts[id];
  const width = Math.max(300, element.clientWidth - 10);  // follows the window, refresh by refresh
  if (existing && existing.subject === subject && existing.range === state.range) {
    if (existing.plot.width !== width) existing.plot.setSize({ width, height: CHART_HEIGHT });
    existing.plot.setData(data);
    return;
  }
  if (existing) existing.plot.destroy();
  const rate = (u, v) => (v == null ? "-" : `${v.toFixed(1)} msg/s`);
  const series = [["publish", "#2a7ab0"], ["deliver", "#27ae60"], ["ack", "#c0392b"]]
    .map(([label, stroke]) => ({ label, stroke, width: 2, value: rate }));
  const plot = new uPlot({
    width, height: CHART_HEIGHT,
    series: [{ label: "time" }, ...series],
    scales: {
      x: { time: true, range: () => { const now = Date.now() / 1000; return [now - state.range, now]; } },
      y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] },
    },
    axes: [{}, { label: "messages/s", size: 60 }],
  }, data, element);
  state.charts[id] = { subject, plot, range: state.range };
}

// The count field of the message browser: how many to peek or get (1-100).
const messageCount = () => Math.min(100, Math.max(1, Number($("#peek-count").value) || 10));

function showMessages(items, note) {
  fillTable("#messages", items.map((m, i) => ({ ...m, n: i + 1 })), [
    (m) => m.n, (m) => m.body ?? `(base64) ${m.body_base64}`,
    (m) => Object.entries(m.headers).map(([k, v]) => `${k}=${v}`).join(", "),
    (m) => m.priority, (m) => m.redelivery_count, (m) => m.age,
  ]);
  $("#message-note").textContent = note;
}

async function peek() {
  const name = $("#queue-name").textContent;
  const page = await api(queuePath(name) + "/messages?count=" + messageCount());
  showMessages(page.items, "peeked: still in the queue");
}

function route() {
  const [view, ...rest] = (location.hash.slice(1) || "overview").split("/");
  const name = decodeURIComponent(rest.join("/"));
  document.querySelectorAll("main > section").forEach((s) => { s.hidden = s.id !== view + "-view"; });
  return () => views[view] ? views[view](name) : views.overview();
}

async function refreshVhosts() {
  const { items } = await api("/api/vhosts");
  const select = $("#vhost");
  const names = items.map((v) => v.name);
  if (!names.includes(state.vhost)) state.vhost = "/";  // remembered, but gone since
  if (names.join("\n") !== [...select.options].map((o) => o.value).join("\n")) {
    select.replaceChildren(...names.map((name) => new Option(name, name, false, name === state.vhost)));
  }
}

async function refresh() {
  try {
    await Promise.all([route()(), refreshVhosts()]);
    $("#status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("#status").textContent = "error: " + e.message;
  }
}

// Runs an action, or shows why it failed; a destructive one asks first.
async function act(question, action) {
  if (question && !confirm(question)) return;
  try {
    await action();
  } catch (e) {
    alert(e.message);
  }
  refresh();
}

document.querySelectorAll("#queues th[data-key]").forEach((th) => th.addEventListener("click", () => {
  state.sortDesc = state.sortKey === th.dataset.key ? !state.sortDesc : th.dataset.key !== "name";
  state.sortKey = th.dataset.key;
  renderQueues();
}));
$("#filter").addEventListener("input", renderQueues);
$("#range").value = String(state.range);
$("#range").addEventListener("change", (e) => {
  state.range = Number(e.target.value);
  localStorage.setItem("stompmq.range", e.target.value);
  refresh();
});
$("#vhost").addEventListener("change", (e) => {
  state.vhost = e.target.value;
  localStorage.setItem("stompmq.vhost", state.vhost);
  state.after = "";
  if (location.hash.startsWith("#queue/")) location.hash = "#queues"; else refresh();
});
$("#next-page").addEventListener("click", () => { state.after = state.nextAfter || ""; refresh(); });
$("#prev-page").addEventListener("click", () => { state.after = ""; refresh(); });
$("#peek").addEventListener("click", () => act(null, peek));
$("#peek-count").addEventListener("input", () => { $("#get").textContent = `Get ${messageCount()}`; });
// Get and move take messages out of the queue for good: each asks first.
$("#get").addEventListener("click", () => {
  const name = $("#queue-name").textContent;
  const count = messageCount();
  act(`Take up to ${count} ready messages of ${name}? They are acknowledged: gone from the queue for good.`,
    async () => {
      const page = await post(queuePath(name) + "/get", { count });
      showMessages(page.items, `taken: ${page.items.length} removed from the queue`);
    });
});
$("#move").addEventListener("click", () => {
  const name = $("#queue-name").textContent;
  const to = prompt(`Move the ready messages of ${name} to which queue?`, name.startsWith("DLQ.") ? name.slice(4) : "");
  if (!to) return;
  act(`Move the ready messages of ${name} (up to 10000) to ${to}?`, async () => {
    const result = await post(queuePath(name) + "/move", { to });
    showMessages([], `moved ${result.moved} to ${result.to}` + (result.stopped ? ` (stopped: ${result.stopped})` : ""));
  });
});
$("#purge").addEventListener("click", () => {
  const name = $("#queue-name").textContent;
  act(`Purge every ready message of ${name}?`, () => post(queuePath(name) + "/purge"));
});
$("#delete").addEventListener("click", () => {
  const name = $("#queue-name").textContent;
  act(`Delete queue ${name} and its messages?`, async () => {
    await api(queuePath(name), { method: "DELETE", headers: JSON_HEADERS });
    location.hash = "#queues";
  });
});
$("#publish-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const name = $("#queue-name").textContent;
  act(null, () => post(queuePath(name) + "/publish", { body: $("#publish-body").value,
                                                      headers: pairs($("#publish-headers").value) }));
});
// Each declaration says what it will do and asks first.
$("#declare-queue-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const name = $("#declare-queue-name").value.trim();
  const args = pairs($("#declare-queue-arguments").value);
  const shown = Object.entries(args).map(([k, v]) => `${k}=${v}`).join(", ") || "no arguments";
  act(`Declare queue ${name} in vhost ${state.vhost} (${shown})? An existing declaration is replaced.`, async () => {
    await put(queuePath(name), { arguments: args });
    $("#declare-queue-form").reset();
  });
});
$("#declare-exchange-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const name = $("#declare-exchange-name").value.trim();
  const type = $("#declare-exchange-type").value;
  act(`Declare ${type} exchange ${name} in vhost ${state.vhost}?`, async () => {
    const path = "/api/exchanges/" + encodeURIComponent(state.vhost) + "/" + encodeURIComponent(name);
    await put(path, type === "consistent-hash" ? {} : { type });
    $("#declare-exchange-form").reset();
  });
});
$("#add-user-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const name = $("#add-user-name").value.trim();
  const tags = ["administrator", "monitoring"].filter((tag) => $("#add-user-" + tag).checked);
  const grant = $("#add-user-grant").checked;
  const what = (tags.length ? `tags ${tags.join(", ")}` : "no tags") +
    (grant ? `, every permission on vhost ${state.vhost}` : ", no permissions");
  act(`Add user ${name} (${what})? An existing user of that name gets this password and these tags.`, async () => {
    await put("/api/users/" + encodeURIComponent(name), { password: $("#add-user-password").value, tags });
    if (grant) {
      await put(`/api/permissions/${encodeURIComponent(state.vhost)}/${encodeURIComponent(name)}`,
        { configure: ".*", write: ".*", read: ".*" });
    }
    $("#add-user-form").reset();
  });
});
$("#close-connection").addEventListener("click", () => {
  const id = location.hash.split("/")[1];
  act(`Close connection ${decodeURIComponent(id)}?`, async () => {
    await api("/api/connections/" + id, { method: "DELETE", headers: JSON_HEADERS });
    location.hash = "#connections";
  });
});
window.addEventListener("hashchange", () => {
  $("#messages tbody").replaceChildren();
  $("#message-note").textContent = "";
  refresh();
});
refresh();
setInterval(refresh, REFRESH_MS);
