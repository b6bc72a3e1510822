// rankflow's web page: plain modern JavaScript, no framework, no build step.
// It reads the public API of the server it was served by: the boards
// (/v1/boards), a live top-N over Server-Sent Events (.../top/stream), a
// view's periods (.../periods), a member's neighbourhood (.../around/{m})
// and that member's stream (.../members/{m}/stream, "overtaken by ...").
//
// Member ids and every other string from the API are user data: they only
// ever reach the page through textContent, never as markup.
"use strict";

// An error nobody caught is logged to the console like any other, so a
// browser that shows only console messages (the Firefox check of
// tests/it/browser.rs) reports it too.
window.addEventListener("error", (e) => console.error(`rankflow page: ${e.message}`));
window.addEventListener("unhandledrejection", (e) =>
  console.error(`rankflow page: ${e.reason}`),
);

const $ = (id) => document.getElementById(id);

const state = {
  boards: [],
  board: null, // one entry of /v1/boards
  top: null, // the open EventSource of the top list
  member: null, // the open EventSource of the searched member
  generation: 0, // bumped on every change of selection: late answers are dropped
  lastScores: new Map(), // member -> "rank score", to mark changed rows
};

// ------------------------------------------------------------ helpers

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (className) e.className = className;
  return e;
}

function option(value, label) {
  const o = el("option", label);
  o.value = value;
  return o;
}

function clock() {
  return new Date().toLocaleTimeString([], { hour12: false });
}

/// The JSON of an answer, or an Error carrying the API's own message.
async function getJson(url) {
  const resp = await fetch(url, { headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await resp.json();
  } catch (_) {
    body = null;
  }
  if (!resp.ok) {
    const msg = body && body.error ? body.error : `HTTP ${resp.status}`;
    const err = new Error(msg);
    err.status = resp.status;
    throw err;
  }
  return body;
}

function scopes() {
  return $("scope")
    .value.split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/// The view's path segment: a listed view, or a rolling view with its N.
function viewName() {
  const v = $("view").value;
  if (!v.startsWith("union:")) return v;
  const offer = state.board.unions[Number(v.slice(6))];
  const max = offer.max_n;
  let n = Math.floor(Number($("union-n").value) || 1);
  n = Math.min(Math.max(n, 1), max);
  return offer.view.replace("<N>", String(n));
}

function viewInfo() {
  return state.board.views.find((v) => v.view === $("view").value) || null;
}

function base() {
  return (
    "/v1/boards/" +
    encodeURIComponent(state.board.name) +
    "/" +
    encodeURIComponent(viewName())
  );
}

/// Query string of the current selection; `extra` adds route parameters.
function query(extra) {
  const q = new URLSearchParams();
  for (const s of scopes()) q.append("scope", s);
  if ($("period").value) q.append("period", $("period").value);
  q.append("rank", $("rank").value);
  for (const [k, v] of Object.entries(extra || {})) q.append(k, String(v));
  return q.toString();
}

function needsScope() {
  return state.board.scoped && scopes().length === 0;
}

// ------------------------------------------------------------ tables

/// Fills `tbody` with entries; `mark(entry)` names a class for a row.
function fillRows(tbody, entries, mark) {
  const rows = entries.map((e) => {
    const tr = el("tr", undefined, mark(e) || "");
    tr.append(
      el("td", e.rank, "rank"),
      el("td", e.member, "member"),
      el("td", e.score, "score"),
    );
    return tr;
  });
  tbody.replaceChildren(...rows);
}

function describe(list) {
  const parts = [];
  parts.push(list.period ? `period ${list.period}` : "all time");
  if (list.scopes) parts.push(`scopes ${list.scopes.join(", ")}`);
  else if (list.scope) parts.push(`scope ${list.scope}`);
  parts.push(list.source);
  parts.push(`${list.total} members`);
  return parts.join(" · ");
}

function renderTop(list) {
  const before = state.lastScores;
  const after = new Map();
  fillRows($("top").tBodies[0], list.entries, (e) => {
    const now = `${e.rank} ${e.score}`;
    after.set(e.member, now);
    // Only rows that moved or scored are marked, not a first render.
    return before.size > 0 && before.get(e.member) !== now ? "changed" : "";
  });
  state.lastScores = after;
  $("top-empty").hidden = list.entries.length > 0;
  $("status").textContent = `${describe(list)} · updated ${clock()}`;
  $("status").dataset.period = list.period || "";
  $("status").dataset.source = list.source;
}

function showTopError(message) {
  $("top").tBodies[0].replaceChildren();
  $("top-empty").hidden = true;
  $("status").textContent = message;
  $("status").dataset.period = "";
  $("status").dataset.source = "";
}

// ------------------------------------------------------------ live top

function closeTop() {
  if (state.top) state.top.close();
  state.top = null;
}

/// Reads the top once (so an error shows the API's message, which an
/// EventSource cannot see), then follows its stream.
async function openTop() {
  closeTop();
  const gen = ++state.generation;
  state.lastScores = new Map();
  $("top-title").textContent = `Top of ${state.board.name} · ${viewName()}`;
  if (needsScope()) {
    showTopError(`${state.board.name} is scoped: enter a scope (or a,b or *).`);
    return;
  }
  const qs = query({ limit: $("limit").value });
  let first;
  try {
    first = await getJson(`${base()}/top?${qs}`);
  } catch (e) {
    if (gen === state.generation) showTopError(e.message);
    return;
  }
  if (gen !== state.generation) return;
  renderTop(first);
  const es = new EventSource(`${base()}/top/stream?${qs}`);
  state.top = es;
  es.onmessage = (m) => {
    if (gen !== state.generation) return;
    renderTop(JSON.parse(m.data));
    $("status").classList.remove("stale");
  };
  es.onerror = () => {
    if (gen !== state.generation) return;
    // EventSource reconnects by itself (with Last-Event-ID); say so.
    $("status").classList.add("stale");
    if (es.readyState === EventSource.CLOSED) {
      $("status").textContent = "The live view closed; pick the view again.";
    }
  };
}

// ------------------------------------------------------------ around me

function closeMember() {
  if (state.member) state.member.close();
  state.member = null;
  $("overtaken").hidden = true;
}

/// Whether the member is on the board: a members read lists an absent id
/// under "missing" where `around` would answer 404, which a browser logs
/// as an error. POST takes any id, commas included.
async function isOnBoard(member) {
  const resp = await fetch(`${base()}/members?${query()}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify([member]),
  });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(body && body.error ? body.error : `HTTP ${resp.status}`);
  return !body.missing.includes(member);
}

async function showAround(member) {
  if (!(await isOnBoard(member))) {
    const err = new Error(`${member} is not on this board.`);
    err.status = 404;
    throw err;
  }
  const radius = Math.max(0, Math.floor(Number($("radius").value) || 0));
  const url = `${base()}/around/${encodeURIComponent(member)}?${query({ radius })}`;
  const list = await getJson(url);
  fillRows($("around").tBodies[0], list.entries, (e) =>
    e.member === member ? "me" : "",
  );
  $("around").hidden = false;
  const mine = list.entries.find((e) => e.member === member);
  $("around-status").textContent = mine
    ? `${member}: rank ${mine.rank} of ${list.total}, score ${mine.score} · ${clock()}`
    : `${member} · ${clock()}`;
}

function overtakenText(member, ev) {
  const notes = [];
  if (ev.overtaken_by && ev.overtaken_by.length > 0) {
    notes.push(`${member} was overtaken by ${ev.overtaken_by.join(", ")}`);
  }
  if (ev.overtook && ev.overtook.length > 0) {
    notes.push(`${member} overtook ${ev.overtook.join(", ")}`);
  }
  return notes.join("; ");
}

/// The neighbourhood of a member, kept current by the member's stream.
async function searchMember() {
  closeMember();
  const member = $("member").value.trim();
  const gen = state.generation;
  if (!member) return;
  if (needsScope()) {
    $("around-status").textContent = "Enter a scope first.";
    return;
  }
  try {
    await showAround(member);
  } catch (e) {
    $("around").hidden = true;
    $("around-status").textContent =
      e.status === 404 ? `${member} is not on this board.` : e.message;
    return;
  }
  if (gen !== state.generation) return;
  const es = new EventSource(
    `${base()}/members/${encodeURIComponent(member)}/stream?${query()}`,
  );
  state.member = es;
  es.onmessage = (m) => {
    const text = overtakenText(member, JSON.parse(m.data));
    if (text) {
      $("overtaken").textContent = `${text} (${clock()})`;
      $("overtaken").hidden = false;
    }
    showAround(member).catch((e) => {
      $("around-status").textContent = e.message;
    });
  };
  es.addEventListener("absent", () => {
    $("around-status").textContent = `${member} left this board.`;
    $("around").hidden = true;
  });
}

// ------------------------------------------------------------ selection

function fillViews() {
  const views = $("view");
  const opts = state.board.views.map((v) =>
    option(v.view, v.window ? `${v.view} (window)` : v.view),
  );
  state.board.unions.forEach((u, i) => {
    opts.push(option(`union:${i}`, u.view.replace("<N>", "N") + " (rolling)"));
  });
  views.replaceChildren(...opts);
}

/// The period picker: the current period, then the view's past periods,
/// live or archived, newest first (only a view with periods has them).
async function fillPeriods(keep) {
  const gen = state.generation;
  const picker = $("period");
  const info = viewInfo();
  const current = option("", info && info.period ? `current (${info.period})` : "current");
  picker.replaceChildren(current);
  if (!info || !info.period || scopes().length > 1 || scopes()[0] === "*" || needsScope()) {
    picker.disabled = true;
    return;
  }
  picker.disabled = false;
  const q = new URLSearchParams({ limit: "100" });
  for (const s of scopes()) q.append("scope", s);
  let list;
  try {
    list = await getJson(`${base()}/periods?${q}`);
  } catch (_) {
    return; // The top list shows what is wrong with the selection.
  }
  if (gen !== state.generation) return;
  for (const p of list.periods) {
    if (p.period === info.period) continue;
    picker.append(option(p.period, `${p.period} · ${p.source} · ${p.members} members`));
  }
  if (keep && [...picker.options].some((o) => o.value === keep)) picker.value = keep;
}

function selectBoard(name, view, period) {
  const board = state.boards.find((b) => b.name === name) || state.boards[0];
  state.board = board;
  for (const li of $("boards").children) {
    li.firstChild.setAttribute("aria-current", li.dataset.board === board.name ? "true" : "false");
  }
  $("scope-label").hidden = !board.scoped;
  fillViews();
  if (view && [...$("view").options].some((o) => o.value === view)) $("view").value = view;
  viewChanged(period);
}

function viewChanged(period) {
  const v = $("view").value;
  const union = v.startsWith("union:") ? state.board.unions[Number(v.slice(6))] : null;
  $("union-n-label").hidden = !union;
  if (union) {
    $("union-n").max = String(union.max_n);
    $("union-unit").textContent = union.view.replace("last:<N>", "");
  }
  $("period").replaceChildren(option("", "current"));
  refresh(period);
}

/// Follows the selection again with the same period choices (period, rank
/// style or list length changed).
function reopen() {
  saveHash();
  openTop();
  if ($("member").value.trim()) searchMember();
}

/// Re-reads everything for the current selection, the periods too.
function refresh(period) {
  saveHash();
  openTop();
  fillPeriods(period).then(() => {
    if (period && $("period").value === period) {
      saveHash();
      openTop();
    }
  });
  if ($("member").value.trim()) searchMember();
  else closeMember();
}

// The selection lives in the address (#board=..&view=..), so a reload or a
// shared link shows the same list.
function saveHash() {
  const h = new URLSearchParams({ board: state.board.name, view: $("view").value });
  if ($("period").value) h.set("period", $("period").value);
  if ($("scope").value) h.set("scope", $("scope").value);
  history.replaceState(null, "", `#${h}`);
}

function renderBoards() {
  const items = state.boards.map((b) => {
    const li = el("li");
    li.dataset.board = b.name;
    const button = el("button", b.name);
    button.type = "button";
    button.title = `${b.event} events${b.scoped ? ", scoped" : ""}`;
    button.addEventListener("click", () => selectBoard(b.name));
    li.append(button, el("span", b.scoped ? `${b.event} · scoped` : b.event, "meta"));
    return li;
  });
  $("boards").replaceChildren(...items);
}

async function start() {
  try {
    state.boards = (await getJson("/v1/boards")).boards;
  } catch (e) {
    $("status").textContent = `Cannot list the boards: ${e.message}`;
    return;
  }
  if (state.boards.length === 0) {
    $("status").textContent = "No boards are configured.";
    return;
  }
  renderBoards();
  $("view").addEventListener("change", () => viewChanged());
  $("union-n").addEventListener("change", () => viewChanged());
  $("period").addEventListener("change", reopen);
  $("scope").addEventListener("change", () => refresh());
  $("rank").addEventListener("change", reopen);
  $("limit").addEventListener("change", () => openTop());
  $("search").addEventListener("submit", (ev) => {
    ev.preventDefault();
    searchMember();
  });
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.get("scope")) $("scope").value = h.get("scope");
  selectBoard(h.get("board"), h.get("view") || undefined, h.get("period") || undefined);
}

document.addEventListener("DOMContentLoaded", start);
