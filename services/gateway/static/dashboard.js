// Venn's live dashboard: reads the gateway's event stream (/v1/events/dashboard, server-sent
// events) and renders each JSON snapshot. The stream needs an operator token, sent in the
// Authorization header (so it is fetch() reading the stream, not EventSource, which cannot
// send one). Every value from the server is put in the page as text, never as HTML.
"use strict";

const EVENTS = "/v1/events/dashboard";
const TOKEN_KEY = "venn-operator-token";
const HISTORY_S = 300; // seconds of history the charts keep
const RECONNECT_MS = 2000;

const $ = (id) => document.getElementById(id);

// -- token: from the URL fragment (#token=...), the login field, or this tab's storage ----
function takeTokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, "", location.pathname + location.search); // out of the address bar
  }
}

function showLogin(message) {
  $("board").hidden = true;
  $("login").hidden = false;
  $("logout").hidden = true;
  $("login-error").textContent = message || "";
  setConnection("refused", message ? "refused" : "not connected");
}

function setConnection(state, text) {
  const pill = $("connection");
  pill.dataset.state = state;
  pill.textContent = text;
}

// -- the stream ---------------------------------------------------------------------------
let controller = null;

async function connect() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    showLogin("");
    return;
  }
  $("login").hidden = true;
  $("board").hidden = false;
  $("logout").hidden = false;
  const mine = new AbortController();
  controller = mine;
  let response;
  try {
    response = await fetch(EVENTS, {
      headers: { Authorization: "Bearer " + token, Accept: "text/event-stream" },
      cache: "no-store",
      signal: mine.signal,
    });
  } catch (err) {
    return mine.signal.aborted ? undefined : retry();
  }
  if (response.status === 401 || response.status === 403) {
    sessionStorage.removeItem(TOKEN_KEY);
    const body = await response.json().catch(() => ({}));
    showLogin(`the gateway refused the token (${body.error || response.status})`);
    return;
  }
  if (!response.ok || !response.body) {
    return retry();
  }
  setConnection("live", "live");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!onEvent(block)) return; // refused mid-stream: back to the login
      }
    }
  } catch (err) {
    if (mine.signal.aborted) return; // the operator forgot the token
  }
  retry();
}

function retry() {
  setConnection("reconnecting", "reconnecting…");
  setTimeout(connect, RECONNECT_MS);
}

// One SSE block: "event: NAME" and "data: ..." lines. False when the stream must stop.
function onEvent(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return true;
  const payload = JSON.parse(data.join("\n"));
  if (name === "auth") {
    sessionStorage.removeItem(TOKEN_KEY);
    if (controller) controller.abort();
    showLogin(`the token is no longer accepted (${payload.error})`);
    return false;
  }
  if (name === "snapshot") render(payload);
  return true;
}

// -- rendering ----------------------------------------------------------------------------
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "–" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function fmt(x, digits = 1) {
  return x === null || x === undefined ? "–" : Number(x).toFixed(digits);
}

function requirementText(req) {
  const parts = Object.entries(req || {}).map(([k, v]) => `${k} ≥ ${v}`);
  return parts.length ? parts.join(", ") : "any device";
}

function fill(tbody, rows, build) {
  const fresh = document.createElement("tbody");
  for (const item of rows) build(fresh.insertRow(), item);
  tbody.replaceWith(fresh);
}

function span(s) {
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

// The scheduler's completion estimate from now, P50 (P90) (venn/core/estimate.py).
function finishes(j) {
  if (j.estimate_state === "never") return "not at this supply";
  if (j.estimated_remaining_s === null || j.estimated_remaining_s === undefined) return null;
  const late = j.estimated_remaining_p90_s;
  const band = late === null || late === undefined ? "" : ` (P90 ${span(late)})`;
  return `in ${span(j.estimated_remaining_s)}${band}`;
}

function renderJobs(jobs) {
  fill(document.querySelector("#jobs tbody"), jobs, (row, j) => {
    row.dataset.jobId = j.job_id;
    row.dataset.state = j.state;
    row.dataset.round = j.round;
    row.dataset.roundsDone = j.rounds_done;
    row.dataset.rounds = j.rounds === null ? "" : j.rounds;
    cell(row, j.job_id, "job-id");
    const state = cell(row, j.state, "state");
    state.dataset.state = j.state;
    cell(row, j.rounds === null ? j.round : `${j.round} of ${j.rounds}`, "round");
    const bar = document.createElement("div");
    bar.className = "bar";
    const fillBar = document.createElement("span");
    const share = j.rounds ? Math.min(1, j.rounds_done / j.rounds) : 0;
    fillBar.style.width = `${Math.round(share * 100)}%`;
    bar.appendChild(fillBar);
    bar.title = `${j.rounds_done} rounds done` + (j.rounds_failed ? `, ${j.rounds_failed} failed` : "");
    row.insertCell().appendChild(bar);
    const open = j.open_round;
    cell(row, open ? `${Math.min(open.assigned, open.demand)} / ${open.demand}` : null, "num");
    cell(row, j.waiting ? j.waiting.replaceAll("_", " ") : null);
    cell(row, finishes(j), "num finishes");
    cell(row, fmt(j.sched_delay_s), "num");
    cell(row, fmt(j.elapsed_s), "num");
    cell(row, fmt(j.jct_s), "num jct");
  });
  $("jobs-empty").hidden = jobs.length > 0;
}

function renderDemand(groups) {
  fill(document.querySelector("#demand tbody"), groups, (row, g) => {
    row.dataset.group = g.group;
    cell(row, g.group, "num");
    cell(row, requirementText(g.requirement));
    cell(row, g.open_jobs.length ? g.open_jobs.join(", ") : "none");
    cell(row, g.open_demand, "num");
    cell(row, fmt(g.eligible_rate_per_s, 2), "num");
    cell(row, g.fed_by.length ? g.fed_by.join(", ") : "none");
  });
}

function renderSupply(supply, plan) {
  const feeds = new Map((plan.device_groups || []).map((d) => [d.device_group, d.feeds]));
  fill(document.querySelector("#supply tbody"), supply.device_groups || [], (row, d) => {
    row.dataset.deviceGroup = d.device_group;
    cell(row, d.device_group, "num");
    cell(row, d.eligible_for.length ? d.eligible_for.join(", ") : "none");
    cell(row, fmt(d.checkin_rate_per_s, 2), "num");
    cell(row, d.checkins_in_window, "num");
    const fed = feeds.get(d.device_group) || [];
    cell(row, fed.length ? fed.join(", ") : "none");
  });
  $("plan-meta").textContent = plan.available
    ? `policy ${plan.policy}; scheduler snapshot ${fmt(plan.age_s)} s old; ` +
      `supply over the last ${supply.window} check-ins`
    : "no snapshot from the scheduler yet";
}

function renderDead(dead) {
  const sources = Object.entries(dead.by_source).map(([t, n]) => `${t}: ${n}`);
  $("dead-sources").textContent = !dead.available
    ? "the gateway may not read venn.dead-letters"
    : sources.length ? "by source: " + sources.join(", ") : "none";
  fill(document.querySelector("#dead tbody"), dead.recent, (row, d) => {
    cell(row, new Date(d.time * 1000).toLocaleTimeString());
    cell(row, d.source_topic);
    cell(row, `${d.partition}@${d.offset}`);
    cell(row, d.reason);
  });
}

// -- charts (uPlot) -------------------------------------------------------------------------
const series = { t: [], assign: [], checkins: [], running: [], demand: [] };
let rateChart = null;
let jobChart = null;

function chartWidth() {
  return Math.max(320, Math.min(640, Math.floor((document.body.clientWidth - 80) / 2)));
}

function makeCharts() {
  if (typeof uPlot === "undefined") return; // the library failed to load: tables still work
  const axes = [{}, { size: 50 }];
  rateChart = new uPlot(
    {
      width: chartWidth(), height: 200, axes,
      series: [
        {},
        { label: "assignments/s", stroke: "#2b6cb0", width: 2 },
        { label: "check-ins/s", stroke: "#b7791f", width: 2 },
      ],
    },
    [[], [], []], $("chart-rates"),
  );
  jobChart = new uPlot(
    {
      width: chartWidth(), height: 200, axes,
      series: [
        {},
        { label: "jobs running", stroke: "#2b6cb0", width: 2 },
        { label: "devices needed", stroke: "#c0392b", width: 2 },
      ],
    },
    [[], [], []], $("chart-jobs"),
  );
}

function record(s) {
  const demand = s.open_demand.reduce((sum, g) => sum + g.open_demand, 0);
  series.t.push(s.time);
  series.assign.push(s.assignments.per_s);
  series.checkins.push(s.supply.available ? s.supply.checkin_rate_per_s : null);
  series.running.push(s.jobs.filter((j) => j.ended_at === null).length);
  series.demand.push(demand);
  while (series.t.length && series.t[0] < s.time - HISTORY_S) {
    for (const key of Object.keys(series)) series[key].shift();
  }
  if (rateChart) rateChart.setData([series.t, series.assign, series.checkins]);
  if (jobChart) jobChart.setData([series.t, series.running, series.demand]);
}

function render(s) {
  const counts = s.job_counts;
  $("t-running").textContent = (counts.running || 0) + (counts.submitted || 0);
  $("t-finished").textContent = counts.finished || 0;
  $("t-assign").textContent = fmt(s.assignments.per_s);
  $("t-checkins").textContent = s.supply.available ? fmt(s.supply.checkin_rate_per_s) : "–";
  $("t-busy").textContent = s.supply.available ? s.supply.busy_devices : "–";
  $("t-dead").textContent = s.dead_letters.total;
  renderJobs(s.jobs);
  renderDemand(s.open_demand);
  renderSupply(s.supply, s.plan);
  renderDead(s.dead_letters);
  record(s);
  const ready = s.gateway.view_ready ? "" : " (job view catching up)";
  $("updated").textContent = `updated ${new Date(s.time * 1000).toLocaleTimeString()}${ready}`;
  document.body.dataset.snapshots = String(Number(document.body.dataset.snapshots || 0) + 1);
}

// -- start --------------------------------------------------------------------------------
window.addEventListener("DOMContentLoaded", () => {
  takeTokenFromFragment();
  makeCharts();
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    connect();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    if (controller) controller.abort();
    showLogin("");
  });
  connect();
});
