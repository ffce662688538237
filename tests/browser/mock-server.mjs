// An in-memory stand-in for Warden's HTTP server, for working on the web UI and its browser
// test without building the Rust binary or loading a model. It serves web/ the way the real
// server does (`/` and `/assets/<file>`, with the same Content-Security-Policy) and
// implements the browser API: cookie sessions with a CSRF cookie, sign-in rate limiting, the
// first-administrator bootstrap, conversations, runs whose answers stream as Server-Sent
// Events with gapless ids and Last-Event-ID replay, and the chat agent's events and actions
// (`GET /api/actions/{id}`, `POST /api/actions/{id}/confirm|reject`).
//
//   node tests/browser/mock-server.mjs [--port 8099] [--bootstrap] [--chaos]
//
// --bootstrap starts with no accounts and prints the `#bootstrap=TOKEN` link; otherwise the
// account WARDEN_USER / WARDEN_PASSWORD (default alice / correct-horse, an admin) exists, and
// the viewer vera / viewer-horse. --chaos drops every event stream after a few events and
// replays a few events twice on reconnect, so the UI's de-duplication is exercised. A message
// containing [[fail]], [[resume]] or [[slow]] makes its run fail, simulate a server restart,
// or stream slowly. Agent scenarios (see SCENARIOS): [[kb]] cites two passages, [[incident]],
// [[incidents]], [[report]] and [[missing]] show cards, [[diagnose]] and [[recover]] propose
// actions to confirm, [[clarify]] asks a question, [[degraded]] adds a run.degraded notice,
// [[xss]] puts HTML into citation and card fields, [[extractive]] answers with quoted
// passages after the faithfulness gate rejected the model's answer, and [[abstain]] answers
// that the knowledge bases do not hold it. Diagnostics: `GET /api/incidents`,
// `GET|POST /api/diagnostics` and `GET /api/diagnostics/{id}`; a task's run streams the graph's
// public steps (the scenarios of mock-diagnostics.mjs, one per incident) `diagnosticStepMs`
// apart, and the operator otto / operator-horse may start them as admins do. Administration
// (knowledge bases, sync, search, passages, users, groups, tokens, audit): mock-admin.mjs.
// Conversation memory (`GET …/memory`, `DELETE …/memory/{item}`, `POST …/confirm`; a first
// message with [[memory]] seeds items): mock-memory.mjs.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { adminState, handleAdmin, stopAdmin } from './mock-admin.mjs';
import { diagnosticScenario, mockIncidents } from './mock-diagnostics.mjs';
import { handleMemory, memoryState } from './mock-memory.mjs';

export const CONTENT_SECURITY_POLICY = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

const WEB_DIR = fileURLToPath(new URL('../../web/', import.meta.url));
const MIME_TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
};
const DELTA_COUNT = 40;
const DELTA_INTERVAL_MS = 100;
const SLOW_DELTA_INTERVAL_MS = 300;
const QUEUE_DELAY_MS = 400;
const MAX_BODY_BYTES = 1 << 20;
const LOGIN_FAILURES_ALLOWED = 5;
const LOGIN_LOCKOUT_SECONDS = 30;
const HEARTBEAT_MS = 10_000;
const CHAOS_DROP_AFTER_EVENTS = 7;
const CHAOS_REPLAY_OVERLAP = 3;
/** Agent scenarios stream shorter answers, and their other events this far apart. */
const SCENARIO_DELTA_COUNT = 12;
const SCENARIO_STEP_MS = 80;
const SLOW_SCENARIO_STEP_MS = 700;
const ACTION_LIFETIME_SECONDS = 600;
const HOSTILE_HTML = '<img src=x onerror="window.__xss=1">';
const DIAGNOSTIC_STEP_MS = 120;
const INCIDENT_ID = /^incident_[A-Za-z0-9][A-Za-z0-9-]{0,63}$/;

/** Starts the mock; resolves to {url, port, close(), state}. */
export async function startMockServer({ port = 0, host = '127.0.0.1', bootstrap = false, chaos = false, user, password } = {}) {
  const state = newState({ bootstrap, user, password });
  const server = createServer((request, response) => {
    handle(state, { chaos }, request, response).catch((error) => {
      console.error('mock-server:', error);
      if (!response.headersSent) sendError(response, 500, 'internal', 'internal error');
      else response.end();
    });
  });
  await new Promise((resolve) => server.listen(port, host, resolve));
  const address = server.address();
  const url = `http://${host}:${address.port}`;
  return {
    url,
    port: address.port,
    state,
    bootstrapUrl: state.bootstrapToken ? `${url}/#bootstrap=${state.bootstrapToken}` : null,
    close: () => new Promise((resolve) => {
      for (const run of state.runs.values()) stopRun(run);
      stopAdmin(state.admin);
      for (const stream of state.streams) stream.end();
      server.close(() => resolve());
      server.closeAllConnections?.();
    }),
  };
}

function newState({ bootstrap, user, password }) {
  const state = {
    users: [],
    sessions: new Map(),
    loginFailures: new Map(),
    conversations: new Map(),
    conversationPageSize: 50,
    runs: new Map(),
    streams: new Set(),
    /** Proposed actions by id; `actionDelayMs` holds each decision that long (to see it in flight). */
    actions: new Map(),
    actionDelayMs: 0,
    /** Every decision request: {actionId, decision, key, status}. */
    decisions: [],
    incidents: mockIncidents(),
    /** The live diagnostic sources GET /api/diagnostics/sources reports (none: packs only). */
    sources: [],
    /** Diagnostic tasks by id; each step of a task's run is `diagnosticStepMs` after the last. */
    diagnostics: new Map(),
    diagnosticStepMs: DIAGNOSTIC_STEP_MS,
    nextId: 1,
    bootstrapToken: null,
    ...memoryState(),
  };
  if (bootstrap) {
    state.bootstrapToken = randomToken();
  } else {
    state.users.push({ id: state.nextId++, name: user ?? process.env.WARDEN_USER ?? 'alice', password: password ?? process.env.WARDEN_PASSWORD ?? 'correct-horse', role: 'admin' });
    state.users.push({ id: state.nextId++, name: 'vera', password: 'viewer-horse', role: 'viewer' });
    state.users.push({ id: state.nextId++, name: 'otto', password: 'operator-horse', role: 'operator' });
  }
  state.admin = adminState(state.users);
  return state;
}

// --- Routing ------------------------------------------------------------------------------

async function handle(state, options, request, response) {
  const url = new URL(request.url, 'http://mock.invalid');
  const path = url.pathname;
  setCommonHeaders(response);
  if (!path.startsWith('/api/')) return serveAsset(path, request, response);

  response.setHeader('Cache-Control', 'no-store');
  const method = request.method;
  const route = (pattern) => pattern.exec(path);
  let match;

  if (method === 'POST' && path === '/api/login') return login(state, request, response);
  if (method === 'POST' && path === '/api/bootstrap') return bootstrap(state, request, response);

  const session = sessionOf(state, request);
  if (!session) return sendError(response, 401, 'unauthenticated', 'sign in first');
  const writes = ['POST', 'PUT', 'PATCH', 'DELETE'].includes(method);
  if (writes && !csrfOk(session, request)) {
    return sendError(response, 403, 'csrf', 'missing or wrong X-CSRF-Token');
  }
  if (writes && !String(request.headers['content-type'] ?? '').startsWith('application/json')) {
    return sendError(response, 415, 'unsupported_media_type', 'send application/json');
  }
  const user = state.users.find((candidate) => candidate.id === session.userId);

  if (method === 'GET' && path === '/api/me') return sendJson(response, 200, { user: publicUser(user) });
  if (method === 'POST' && path === '/api/logout') {
    await readJson(request);
    state.sessions.delete(session.token);
    response.setHeader('Set-Cookie', [
      'warden_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0',
      'warden_csrf=; SameSite=Strict; Path=/; Max-Age=0',
    ]);
    response.writeHead(204).end();
    return undefined;
  }
  if (method === 'GET' && path === '/api/conversations') {
    // Pages like the real server: newest first, `before` is the last item's `updated_at.id`.
    const query = new URL(request.url, 'http://mock').searchParams;
    const limit = Number(query.get('limit') ?? state.conversationPageSize);
    let mine = [...state.conversations.values()].filter((c) => c.userId === user.id)
      .sort((a, b) => b.updated_at - a.updated_at || b.id - a.id);
    const before = query.get('before');
    if (before !== null) {
      const [at, id] = before.split('.').map(Number);
      mine = mine.filter((c) => c.updated_at < at || (c.updated_at === at && c.id < id));
    }
    const page = mine.slice(0, limit);
    const last = page[page.length - 1];
    const nextBefore = mine.length > limit ? `${last.updated_at}.${last.id}` : null;
    return sendJson(response, 200, { conversations: page.map(conversationSummary), next_before: nextBefore });
  }
  if (method === 'POST' && path === '/api/conversations') {
    const body = await readJson(request);
    if (body === null) return sendError(response, 400, 'bad_request', 'body must be JSON');
    const now = unixNow();
    const conversation = { id: state.nextId++, userId: user.id, title: typeof body.title === 'string' ? body.title.slice(0, 200) : '', created_at: now, updated_at: now, messages: [] };
    state.conversations.set(conversation.id, conversation);
    return sendJson(response, 201, conversationSummary(conversation));
  }
  if ((match = route(/^\/api\/conversations\/(\d+)$/)) && method === 'GET') {
    const conversation = ownedConversation(state, user, match[1]);
    if (!conversation) return sendError(response, 404, 'not_found', 'no such conversation');
    const messages = [...conversation.messages].sort((a, b) => a.turn - b.turn || (a.role === 'user' ? -1 : 1))
      .map(({ original, ...message }) => message);
    return sendJson(response, 200, { ...conversationSummary(conversation), messages });
  }
  if ((match = route(/^\/api\/conversations\/(\d+)\/messages$/)) && method === 'POST') {
    const conversation = ownedConversation(state, user, match[1]);
    if (!conversation) return sendError(response, 404, 'not_found', 'no such conversation');
    const body = await readJson(request);
    if (!body || typeof body.content !== 'string' || body.content.trim() === '') {
      return sendError(response, 400, 'bad_request', 'content must be a non-empty string');
    }
    // As the real server: secrets are masked before the message is stored; the text as
    // typed is kept only when asked, for its author alone.
    const masked = body.content.replace(/(password\s+(?:is|was)\s+)\S+/gi, '$1[masked:password]');
    const accepted = postMessage(state, conversation, masked, user);
    if (body.keep_original === true && masked !== body.content) {
      const stored = conversation.messages.find((message) => message.id === accepted.message_id);
      stored.original = body.content;
      stored.has_original = true;
    }
    return sendJson(response, 202, accepted);
  }
  if ((match = route(/^\/api\/conversations\/(\d+)\/messages\/(\d+)\/original$/)) && method === 'GET') {
    const conversation = ownedConversation(state, user, match[1]);
    const message = conversation?.messages.find((candidate) => String(candidate.id) === match[2]);
    if (!message || typeof message.original !== 'string') return sendError(response, 404, 'not_found', 'no kept original');
    return sendJson(response, 200, { message_id: message.id, content: message.original });
  }
  const memory = await handleMemory(state, user, method, path, request, response, { readJson, sendJson, sendError, ownedConversation });
  if (memory !== false) return undefined;
  if ((match = route(/^\/api\/runs\/(\d+)$/)) && method === 'GET') {
    const run = ownedRun(state, user, match[1]);
    if (!run) return sendError(response, 404, 'not_found', 'no such run');
    return sendJson(response, 200, publicRun(run));
  }
  if ((match = route(/^\/api\/runs\/(\d+)\/cancel$/)) && method === 'POST') {
    const run = ownedRun(state, user, match[1]);
    if (!run) return sendError(response, 404, 'not_found', 'no such run');
    await readJson(request);
    if (run.status === 'queued' || run.status === 'running') {
      stopRun(run);
      finishRun(state, run, 'cancelled', {});
    }
    return sendJson(response, 202, publicRun(run));
  }
  if ((match = route(/^\/api\/actions\/([A-Za-z0-9_-]+)$/)) && method === 'GET') {
    const action = ownedAction(state, user, match[1]);
    if (!action) return sendError(response, 404, 'not_found', 'no such action');
    return sendJson(response, 200, { action: publicAction(action) });
  }
  if ((match = route(/^\/api\/actions\/([A-Za-z0-9_-]+)\/(confirm|reject)$/)) && method === 'POST') {
    return decideAction(state, user, match[1], match[2], request, response);
  }
  if (method === 'GET' && path === '/api/diagnostics/sources') return listSources(state, user, response);
  if (method === 'GET' && path === '/api/approvals') return listApprovals(state, user, response);
  if ((match = route(/^\/api\/approvals\/([A-Za-z0-9_-]+)\/(approve|reject)$/)) && method === 'POST') {
    return decideApproval(state, user, match[1], match[2], request, response);
  }
  if (method === 'GET' && path === '/api/incidents') return sendJson(response, 200, { incidents: state.incidents });
  if ((match = route(/^\/api\/incidents\/([A-Za-z0-9_-]+)$/)) && method === 'GET') {
    const found = state.incidents.find((candidate) => candidate.id === match[1]);
    return found ? sendJson(response, 200, found) : sendError(response, 404, 'not_found', `incident \`${match[1]}\` not found`);
  }
  if (method === 'GET' && path === '/api/diagnostics') {
    const mine = [...state.diagnostics.values()].filter((task) => task.ownerId === user.id).reverse();
    return sendJson(response, 200, { tasks: mine.map((task) => publicTask(task, false)) });
  }
  if (method === 'POST' && path === '/api/diagnostics') return startDiagnostic(state, user, request, response);
  if ((match = route(/^\/api\/diagnostics\/([A-Za-z0-9_-]+)$/)) && method === 'GET') {
    const task = state.diagnostics.get(match[1]);
    if (!task || task.ownerId !== user.id) return sendError(response, 404, 'not_found', `diagnostic task \`${match[1]}\` not found`);
    return sendJson(response, 200, publicTask(task, true));
  }
  if ((match = route(/^\/api\/runs\/(\d+)\/events$/)) && method === 'GET') {
    const run = ownedRun(state, user, match[1]);
    if (!run) return sendError(response, 404, 'not_found', 'no such run');
    return streamEvents(state, options, run, url, request, response);
  }
  const admin = { admin: state.admin, users: state.users, sessions: state.sessions, nextId: () => state.nextId++ };
  const handled = await handleAdmin(admin, user, method, url, request, response, { readJson, sendJson, sendError });
  if (handled !== false) return undefined;
  return sendError(response, 404, 'not_found', 'no such endpoint');
}

async function serveAsset(path, request, response) {
  if (request.method !== 'GET' && request.method !== 'HEAD') return sendError(response, 405, 'method_not_allowed', 'GET only');
  let file = null;
  if (path === '/' || path === '/index.html') file = 'index.html';
  const asset = /^\/assets\/([A-Za-z0-9][A-Za-z0-9._-]*)$/.exec(path);
  if (asset) file = asset[1];
  if (file === null) return sendError(response, 404, 'not_found', 'no such page');
  let content;
  try {
    content = await readFile(join(WEB_DIR, file));
  } catch {
    return sendError(response, 404, 'not_found', 'no such asset');
  }
  response.writeHead(200, {
    'Content-Type': MIME_TYPES[extname(file)] ?? 'application/octet-stream',
    'Cache-Control': 'no-cache',
  });
  response.end(request.method === 'HEAD' ? undefined : content);
  return undefined;
}

function setCommonHeaders(response) {
  response.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  response.setHeader('X-Content-Type-Options', 'nosniff');
  response.setHeader('Referrer-Policy', 'no-referrer');
  response.setHeader('X-Frame-Options', 'DENY');
}

// --- Accounts -------------------------------------------------------------------------------

async function login(state, request, response) {
  const body = await readJson(request);
  if (!body || typeof body.name !== 'string' || typeof body.password !== 'string') {
    return sendError(response, 400, 'bad_request', 'name and password are required');
  }
  const failures = (state.loginFailures.get(body.name) ?? []).filter((at) => at > Date.now() - LOGIN_LOCKOUT_SECONDS * 1000);
  if (failures.length >= LOGIN_FAILURES_ALLOWED) {
    const retryAfter = Math.ceil((failures[0] + LOGIN_LOCKOUT_SECONDS * 1000 - Date.now()) / 1000);
    response.setHeader('Retry-After', String(Math.max(1, retryAfter)));
    return sendError(response, 429, 'too_many_attempts', 'too many sign-in attempts');
  }
  const user = state.users.find((candidate) => candidate.name === body.name);
  if (!user || user.disabled || !sameSecret(user.password, body.password)) {
    state.loginFailures.set(body.name, [...failures, Date.now()]);
    return sendError(response, 401, 'bad_credentials', 'wrong name or password');
  }
  state.loginFailures.delete(body.name);
  return startSession(state, response, user);
}

async function bootstrap(state, request, response) {
  const body = await readJson(request);
  if (!body || typeof body.token !== 'string' || typeof body.name !== 'string' || typeof body.password !== 'string') {
    return sendError(response, 400, 'bad_request', 'token, name and password are required');
  }
  if (state.bootstrapToken === null || state.users.length > 0) return sendError(response, 409, 'already_bootstrapped', 'an administrator exists');
  if (!sameSecret(state.bootstrapToken, body.token)) return sendError(response, 403, 'bad_token', 'wrong bootstrap token');
  if ([...body.password].length < 8) return sendError(response, 400, 'weak_password', 'at least 8 characters');
  const user = { id: state.nextId++, name: body.name.trim(), password: body.password, role: 'admin', disabled: false, groups: [], created_at: unixNow() };
  state.users.push(user);
  state.bootstrapToken = null;
  return startSession(state, response, user);
}

function startSession(state, response, user) {
  const session = { token: randomToken(), csrf: randomToken(), userId: user.id };
  state.sessions.set(session.token, session);
  response.setHeader('Set-Cookie', [
    `warden_session=${session.token}; HttpOnly; SameSite=Strict; Path=/`,
    `warden_csrf=${session.csrf}; SameSite=Strict; Path=/`,
  ]);
  return sendJson(response, 200, { user: publicUser(user) });
}

function sessionOf(state, request) {
  const cookies = Object.fromEntries(String(request.headers.cookie ?? '').split(';').map((part) => {
    const separator = part.indexOf('=');
    return separator === -1 ? [part.trim(), ''] : [part.slice(0, separator).trim(), part.slice(separator + 1).trim()];
  }));
  return state.sessions.get(cookies.warden_session) ?? null;
}

function csrfOk(session, request) {
  const header = request.headers['x-csrf-token'];
  return typeof header === 'string' && sameSecret(session.csrf, header);
}

function publicUser(user) {
  return { id: user.id, name: user.name, role: user.role };
}

// --- Conversations and runs ---------------------------------------------------------------------

function conversationSummary(conversation) {
  const { id, title, created_at, updated_at } = conversation;
  return { id, title, created_at, updated_at };
}

function ownedConversation(state, user, id) {
  const conversation = state.conversations.get(Number(id));
  return conversation && conversation.userId === user.id ? conversation : null;
}

function ownedRun(state, user, id) {
  const run = state.runs.get(Number(id));
  if (run && run.ownerId !== undefined) return run.ownerId === user.id ? run : null;
  return run && ownedConversation(state, user, run.conversation_id) ? run : null;
}

function publicRun(run) {
  const { id, conversation_id, turn, status, failure_reason, attempts, created_at, updated_at } = run;
  return { id, conversation_id, turn, status, failure_reason, attempts, created_at, updated_at };
}

/**
 * Stores a finished conversation of the user named `owner` without running anything:
 * `turns` are [question, answer] pairs. Resolves to the conversation (its messages carry ids).
 */
export function addStoredConversation(state, owner, title, turns) {
  const user = state.users.find((candidate) => candidate.name === owner);
  const now = unixNow();
  const conversation = { id: state.nextId++, userId: user.id, title, created_at: now, updated_at: now, messages: [] };
  turns.forEach(([question, answer], index) => {
    const turn = index + 1;
    conversation.messages.push({ id: state.nextId++, turn, role: 'user', content: question, run_id: null, created_at: now });
    conversation.messages.push({ id: state.nextId++, turn, role: 'assistant', content: answer, run_id: null, created_at: now });
  });
  state.conversations.set(conversation.id, conversation);
  return conversation;
}

function postMessage(state, conversation, content, user) {
  const now = unixNow();
  const turn = conversation.messages.reduce((max, message) => Math.max(max, message.turn), 0) + 1;
  const run = {
    id: state.nextId++,
    conversation_id: conversation.id,
    turn,
    status: 'queued',
    failure_reason: null,
    attempts: 0,
    created_at: now,
    updated_at: now,
    events: [],
    subscribers: new Set(),
    timers: [],
    answer: '',
  };
  const message = { id: state.nextId++, turn, role: 'user', content, run_id: run.id, created_at: now };
  conversation.messages.push(message);
  conversation.updated_at = now;
  if (!conversation.title) conversation.title = [...content.trim().split('\n')[0]].slice(0, 60).join('');
  state.runs.set(run.id, run);
  simulateRun(state, conversation, run, content, user);
  return { run_id: run.id, message_id: message.id, turn };
}

/**
 * Schedules the run's fake generation: start, the scenario's agent events (route, tools,
 * citations, cards), ~40 deltas (fewer for agent scenarios), the scenario's closing events
 * (confirmations, questions), then the terminal event.
 */
function simulateRun(state, conversation, run, content, user) {
  const scenario = scenarioFor(state, run, user, content);
  const chunks = splitIntoChunks(scenario.answer, scenario.deltaCount);
  const interval = content.includes('[[slow]]') ? SLOW_DELTA_INTERVAL_MS : DELTA_INTERVAL_MS;
  const schedule = (delay, action) => run.timers.push(setTimeout(action, delay));
  schedule(QUEUE_DELAY_MS, () => {
    run.status = 'running';
    run.attempts = 1;
    emit(state, run, 'run.started', { attempt: 1 });
  });
  const step = content.includes('[[slow]]') ? SLOW_SCENARIO_STEP_MS : SCENARIO_STEP_MS;
  let at = QUEUE_DELAY_MS;
  for (const [type, data] of scenario.before) {
    at += step;
    schedule(at, () => emit(state, run, type, data));
  }
  const deltasFrom = at;
  chunks.forEach((chunk, index) => {
    schedule(deltasFrom + (index + 1) * interval, () => {
      if (content.includes('[[fail]]') && index === 10) {
        stopRun(run);
        finishRun(state, run, 'failed', { reason: 'the model stopped unexpectedly (mock failure)' });
        return;
      }
      if (content.includes('[[resume]]') && index === 15) {
        // A restart loses the last few characters that were not yet checkpointed.
        run.attempts = 2;
        const kept = Math.max(0, [...run.answer].length - 5);
        run.answer = [...run.answer].slice(0, kept).join('');
        emit(state, run, 'run.resumed', { attempt: 2, resumed_chars: kept });
      }
      run.answer += chunk;
      emit(state, run, 'message.delta', { text: chunk });
    });
  });
  at = deltasFrom + chunks.length * interval;
  for (const [type, data] of scenario.after) {
    at += step;
    schedule(at, () => emit(state, run, type, data));
  }
  schedule(at + interval, () => {
    const now = unixNow();
    const message = { id: state.nextId++, turn: run.turn, role: 'assistant', content: run.answer, run_id: run.id, created_at: now };
    if (scenario.citations.length > 0) message.citations = scenario.citations;
    conversation.messages.push(message);
    conversation.updated_at = now;
    finishRun(state, run, 'completed', {
      message_id: message.id,
      finish_reason: 'stop',
      usage: { prompt_tokens: 42 + [...content].length, completion_tokens: chunks.length * 3 },
      outcome: scenario.outcome,
    });
  });
}

/**
 * What the agent does for a message: {before: [[type, data]…], answer, after, outcome,
 * citations, deltaCount}. Actions a scenario proposes are stored when the message arrives.
 */
function scenarioFor(state, run, user, content) {
  const has = (word) => content.includes(`[[${word}]]`);
  const hostile = has('xss');
  const route = (intent, mode, source, confidence, extra = {}) => ['route.decided', {
    intent, mode, confidence, source, incident_id: null, diagnostic_task_id: null,
    needs_clarification: false, blocked_reason: null, flags: [], ...extra,
  }];
  const tool = (callId, name, status, summary) => [
    ['tool.started', { call_id: callId, name }],
    ['tool.completed', { call_id: callId, name, status, summary }],
  ];
  const scenario = { before: [], answer: '', after: [], outcome: 'answered', citations: [], deltaCount: SCENARIO_DELTA_COUNT };
  const degraded = has('degraded') ? [['run.degraded', { reason: 'the explanation model timed out; the facts above stand' }]] : [];

  if (has('extractive')) {
    const citation = {
      n: 1, chunk_id: 101, kb: 'ops-runbooks', path: 'disk/full-disk.md', title: 'When a disk is full',
      heading_path: ['Disk', 'When a disk is full'], location: { lines: [12, 24] },
      text: 'Run `df -h` to see which filesystem is full, then `df -i` for inodes.',
    };
    scenario.before = [
      route('knowledge_question', 'bounded_react', 'classifier', 0.82),
      ...tool('call_1', 'knowledge_retrieval', 'ok', '1 passages, 1 relevant'),
      ['answer.unsupported', { reason: 'a sentence of the answer is not supported by the passages it cites' }],
      ['citation', citation],
      ['answer.basis', { basis: 'extractive' }],
    ];
    scenario.citations = [citation];
    scenario.answer = 'Quoted from the knowledge base:\n\n> Run `df -h` to see which filesystem is full, then `df -i` for inodes. [1]';
  } else if (has('abstain')) {
    scenario.before = [
      route('knowledge_question', 'bounded_react', 'classifier', 0.82),
      ...tool('call_1', 'knowledge_retrieval', 'ok', '3 passages, 0 relevant'),
      ['answer.basis', { basis: 'abstained' }],
    ];
    scenario.answer = 'The knowledge bases you can read do not hold an answer to this question.';
  } else if (has('kb')) {
    const citations = [
      {
        n: 1, chunk_id: 101, kb: 'ops-runbooks', path: 'disk/full-disk.md', title: hostile ? `Disk ${HOSTILE_HTML} runbook` : 'When a disk is full',
        heading_path: ['Disk', 'When a disk is full', 'First checks'], location: { lines: [12, 24] },
        text: hostile
          ? `Run df -h first.\n${HOSTILE_HTML}\n<script>window.__xss=2</script>`
          : 'Run `df -h` to see which filesystem is full, then `df -i` for inodes.\nA filesystem can be full of inodes while df -h still shows free space.',
      },
      {
        n: 2, chunk_id: 202, kb: 'ops-runbooks', path: 'logging/journald.pdf', title: 'Journald retention',
        heading_path: ['Logging', 'Retention'], location: { pages: [3, 3] },
        text: 'journalctl --vacuum-size=500M keeps the newest 500 MB of journal files and deletes the rest.',
      },
    ];
    scenario.before = [
      route('knowledge_question', 'bounded_react', 'classifier', 0.82),
      ...tool('call_1', 'kb_search', 'ok', '2 passages from ops-runbooks'),
      ...citations.map((citation) => ['citation', citation]),
    ];
    scenario.citations = citations;
    scenario.answer = [
      'Check which filesystem is full with `df -h`, and inodes with `df -i` [1].',
      '',
      'Then trim the journal: `journalctl --vacuum-size=500M` keeps the newest 500 MB [2]. A marker of a passage that was not cited stays text [7].',
    ].join('\n');
  } else if (has('incidents')) {
    scenario.before = [
      route('incident_query', 'direct_read', 'rule', 1),
      ...tool('call_1', 'list_incidents', 'ok', '3 incidents'),
      ['card', { kind: 'incident_list', data: { incidents: [incident('INC-1042', 'firing', hostile), incident('INC-1041', 'resolved'), incident('INC-1039', 'closed')] } }],
      ...degraded,
    ];
    scenario.answer = 'Three recent incidents; **INC-1042** is still firing.';
  } else if (has('incident')) {
    scenario.before = [
      route('incident_query', 'direct_read', 'rule', 1, { incident_id: 'INC-1042' }),
      ...tool('call_1', 'get_incident', 'ok', 'INC-1042 (firing)'),
      ['card', { kind: 'incident', data: incident('INC-1042', 'firing', hostile) }],
      ...degraded,
    ];
    scenario.answer = 'INC-1042 is **firing**: checkout latency has been above its objective since the deploy.';
  } else if (has('report')) {
    scenario.before = [
      route('diagnostic_status', 'direct_read', 'rule', 1, { diagnostic_task_id: 'diagnostic_7f3a' }),
      ...tool('call_1', 'get_diagnostic_report', 'ok', 'diagnostic_7f3a (completed)'),
      ['card', { kind: 'diagnostic_report', data: diagnosticTask(hostile) }],
    ];
    scenario.answer = 'The diagnostic found connection pool exhaustion in checkout-db. Recovery needs a person to approve it.';
  } else if (has('missing')) {
    scenario.before = [
      route('incident_query', 'direct_read', 'rule', 1, { incident_id: 'INC-9999' }),
      ...tool('call_1', 'get_incident', 'error', 'incident `INC-9999` was not found'),
      ['card', { kind: 'not_found', data: { resource: 'incident', id: hostile ? HOSTILE_HTML : 'INC-9999' } }],
    ];
    scenario.answer = 'There is no incident INC-9999.';
  } else if (has('diagnose') || has('recover')) {
    const recovery = has('recover');
    const action = proposeAction(state, run, user, recovery
      ? {
        kind: 'recovery_request', target: 'diagnostic_7f3a', reason: 'The report recommends restarting the checkout-db connection pooler.',
        parameters: { diagnostic_task_id: 'diagnostic_7f3a', step: 'restart', service: hostile ? HOSTILE_HTML : 'checkout-db-pooler' },
      }
      : {
        kind: 'diagnostic_start', target: 'INC-1042', reason: hostile ? HOSTILE_HTML : 'You asked to diagnose INC-1042.',
        parameters: { incident_id: 'INC-1042', depth: 'standard', window_minutes: 30 },
      });
    scenario.before = [
      route(recovery ? 'recovery_request' : 'diagnostic_start', 'confirmation_required', 'rule', 1, recovery ? { diagnostic_task_id: 'diagnostic_7f3a' } : { incident_id: 'INC-1042' }),
      ...tool('call_1', recovery ? 'get_diagnostic_report' : 'get_incident', 'ok', recovery ? 'diagnostic_7f3a (completed)' : 'INC-1042 (firing)'),
    ];
    scenario.answer = recovery
      ? 'I can ask for approval to restart the pooler. Nothing runs until you confirm, and even then only the approval is recorded.'
      : 'I can start a diagnostic of INC-1042. Confirm below to start it.';
    scenario.after = [['confirmation.required', {
      action_id: action.id, kind: action.kind, target: action.target, reason: action.reason,
      parameters: action.parameters, parameters_hash: action.parameters_hash, expires_at: action.expires_at,
    }]];
    scenario.outcome = 'pending_action';
  } else if (has('clarify')) {
    const question = 'Which incident do you mean: INC-1042 (checkout) or INC-1041 (search)?';
    scenario.before = [route('incident_query', 'clarification', 'classifier', 0.41, { needs_clarification: true, flags: ['ambiguous_reference'] })];
    scenario.after = [['clarification.needed', { question }]];
    scenario.answer = question;
    scenario.outcome = 'clarification';
  } else {
    scenario.before = [route('chat', 'bounded_react', 'classifier', 0.9)];
    scenario.answer = answerFor(content);
    scenario.deltaCount = DELTA_COUNT;
  }
  if (has('kb') || has('report') || has('missing') || has('diagnose') || has('recover') || has('clarify')) scenario.before.push(...degraded);
  return scenario;
}

function incident(id, status, hostile = false) {
  return {
    id,
    fingerprint: 'a1b2c3d4e5f6',
    title: hostile ? `Checkout ${HOSTILE_HTML} latency` : `Checkout latency above SLO (${id})`,
    service: hostile ? HOSTILE_HTML : 'checkout',
    severity: 'critical',
    status,
    labels: { team: 'payments', region: 'eu-west-1' },
    annotations: {},
    starts_at: 1_760_000_000,
    ends_at: status === 'firing' ? null : 1_760_003_600,
    created_at: 1_760_000_005,
    updated_at: 1_760_000_300,
  };
}

function diagnosticTask(hostile = false) {
  return {
    id: 'diagnostic_7f3a',
    incident_id: 'INC-1042',
    owner_id: 1,
    run_id: 'run_diag_1',
    status: 'completed',
    report: {
      component: hostile ? HOSTILE_HTML : 'checkout-db',
      mechanism: 'Connection pool exhausted after the deploy doubled the worker count.',
      recoveryMode: 'manual',
      executionPermitted: false,
      humanApprovalRequired: true,
      validatorStatus: 'passed',
      evidenceIds: ['ev_metrics_17', 'ev_logs_4', hostile ? HOSTILE_HTML : 'ev_trace_9'],
    },
    created_at: 1_760_000_400,
    updated_at: 1_760_000_900,
  };
}

function finishRun(state, run, status, data) {
  run.status = status;
  if (status === 'failed') run.failure_reason = data.reason;
  emit(state, run, `run.${status}`, data);
}

function stopRun(run) {
  for (const timer of run.timers) clearTimeout(timer);
  run.timers = [];
}

function emit(state, run, type, data) {
  const event = { seq: run.events.length + 1, type, data: { ...data, at: Date.now() } };
  run.events.push(event);
  run.updated_at = unixNow();
  for (const subscriber of run.subscribers) subscriber(event);
}

function answerFor(content) {
  const disk = /disk|full|space|磁盘/i.test(content);
  const body = disk
    ? [
      '## When a disk is full',
      '',
      'Start with **what is using the space**, then free it safely:',
      '',
      '1. Check usage per filesystem with `df -h` and inodes with `df -i`.',
      '2. Find the largest directories:',
      '   - `du -xh / --max-depth=2 | sort -h | tail`',
      '   - look at *logs* in `/var/log` first',
      '3. Look for deleted files still held open: `lsof +L1`.',
      '',
      '| Check | Command |',
      '|:------|:--------|',
      '| Space | `df -h` |',
      '| Inodes | `df -i` |',
      '',
      '```bash',
      'journalctl --vacuum-size=500M',
      '```',
      '',
      '> Do not delete files a running process still writes to.',
    ].join('\n')
    : 'Here is what I understood from your message. This is the **mock server**, so the answer is canned.';
  return `${body}\n\nYou wrote:\n\n${content}`;
}

function splitIntoChunks(text, count) {
  const chars = [...text];
  const size = Math.ceil(chars.length / count);
  const chunks = [];
  for (let start = 0; start < chars.length; start += size) chunks.push(chars.slice(start, start + size).join(''));
  return chunks;
}

// --- Diagnostics ---------------------------------------------------------------------------------

/**
 * POST /api/diagnostics {incident_id}: operators and admins only (403 for a viewer), 400 for
 * a malformed id, 404 for an incident that does not exist; 202 with the task and its run.
 */
async function startDiagnostic(state, user, request, response) {
  const body = await readJson(request);
  if (user.role !== 'operator' && user.role !== 'admin') return sendError(response, 403, 'forbidden', 'starting a diagnostic needs an operator or admin');
  if (!body || typeof body.incident_id !== 'string' || !INCIDENT_ID.test(body.incident_id)) {
    return sendError(response, 400, 'invalid', 'incident_id: give an incident id: incident_ then letters, digits and dashes');
  }
  if (!state.incidents.some((incident) => incident.id === body.incident_id)) {
    return sendError(response, 404, 'not_found', `incident \`${body.incident_id}\` not found`);
  }
  const now = unixNow();
  const run = {
    id: state.nextId++, conversation_id: null, ownerId: user.id, turn: null, status: 'queued', failure_reason: null,
    attempts: 0, created_at: now, updated_at: now, events: [], subscribers: new Set(), timers: [], answer: '',
  };
  const id = `diagnostic_${randomBytes(4).toString('hex')}`;
  const task = {
    id, ownerId: user.id, incident_id: body.incident_id, run_id: String(run.id), status: 'queued',
    graph_version: 'diag-graph-v1', thread_id: `warden:${id}:diag-graph-v1`, report: null, created_at: now, updated_at: now,
  };
  state.runs.set(run.id, run);
  state.diagnostics.set(id, task);
  simulateDiagnostic(state, task, run);
  return sendJson(response, 202, { diagnostic_task_id: id, run_id: task.run_id, status: task.status, events: `/api/runs/${run.id}/events` });
}

/** Plays the incident's scenario on the task's run, then stores the report and ends the run. */
function simulateDiagnostic(state, task, run) {
  const scenario = diagnosticScenario(task.incident_id, task.id);
  const step = state.diagnosticStepMs;
  const schedule = (delay, action) => run.timers.push(setTimeout(action, delay));
  schedule(QUEUE_DELAY_MS, () => {
    run.status = 'running';
    run.attempts = 1;
    task.status = 'running';
    emit(state, run, 'run.started', { attempt: 1 });
  });
  scenario.steps.forEach(([type, data], index) => schedule(QUEUE_DELAY_MS + (index + 1) * step, () => emit(state, run, type, data)));
  schedule(QUEUE_DELAY_MS + (scenario.steps.length + 1) * step, () => {
    task.updated_at = unixNow();
    if (scenario.outcome === 'failed') {
      task.status = 'failed';
      finishRun(state, run, 'failed', { reason: scenario.reason });
      return;
    }
    task.report = scenario.report;
    task.status = 'completed';
    finishRun(state, run, 'completed', { message_id: null, finish_reason: 'stop', usage: { prompt_tokens: 0, completion_tokens: 0 }, outcome: 'diagnosed' });
  });
}

function publicTask(task, withReport) {
  const { id, incident_id, run_id, status, graph_version, thread_id, report, created_at, updated_at } = task;
  const summary = {
    id, incident_id, run_id, status, graph_version, thread_id,
    verdict: report?.verdict ?? null, mechanism: report?.mechanism ?? null, recoveryMode: report?.recoveryMode ?? null,
    created_at, updated_at,
  };
  return withReport ? { ...summary, report } : summary;
}

// --- Actions ------------------------------------------------------------------------------------

function proposeAction(state, run, user, { kind, target, reason, parameters }) {
  const now = unixNow();
  const action = {
    id: `act_${randomBytes(6).toString('hex')}`,
    kind, target, reason, parameters,
    parameters_hash: parametersHash(parameters),
    run_id: run.id,
    owner_id: user.id,
    status: 'pending',
    result: null,
    expires_at: now + ACTION_LIFETIME_SECONDS,
    created_at: now,
    decided_at: null,
    responses: new Map(),
  };
  state.actions.set(action.id, action);
  return action;
}

/** sha256 of the parameters as JSON with sorted keys (what the real server hashes). */
export function parametersHash(parameters) {
  const canonical = (value) => {
    if (Array.isArray(value)) return value.map(canonical);
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canonical(value[key])]));
    }
    return value;
  };
  return createHash('sha256').update(JSON.stringify(canonical(parameters))).digest('hex');
}

function ownedAction(state, user, id) {
  const action = state.actions.get(id);
  return action && action.owner_id === user.id ? action : null;
}

function publicAction(action) {
  const { id, kind, target, reason, parameters, parameters_hash, run_id, status, result, expires_at, created_at, decided_at } = action;
  return { id, kind, target, reason, parameters, parameters_hash, run_id, status, result, expires_at, created_at, decided_at };
}

/**
 * POST /api/actions/{id}/confirm|reject: needs an Idempotency-Key (a repeated key gets the
 * first answer again) and the parameters hash the person saw. 409 once decided or expired,
 * 422 when the hash differs, 403 when a viewer confirms a recovery.
 */
async function decideAction(state, user, id, decision, request, response) {
  const body = await readJson(request);
  const action = ownedAction(state, user, id);
  if (!action) return sendError(response, 404, 'not_found', 'no such action');
  const key = request.headers['idempotency-key'];
  if (typeof key !== 'string' || !/^[A-Za-z0-9_-]{1,128}$/.test(key)) {
    return sendError(response, 400, 'bad_request', 'send an Idempotency-Key header');
  }
  if (!body || typeof body.parameters_hash !== 'string') return sendError(response, 400, 'bad_request', 'parameters_hash is required');
  const record = (status, payload) => {
    state.decisions.push({ actionId: id, decision, key, status });
    action.responses.set(key, { status, payload });
    sendJson(response, status, payload);
  };
  const previous = action.responses.get(key);
  if (previous) return sendJson(response, previous.status, previous.payload);
  if (state.actionDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, state.actionDelayMs));
  const now = unixNow();
  if (action.status === 'pending' && action.expires_at <= now) action.status = 'expired';
  if (action.status !== 'pending') {
    return record(409, { error: { code: 'conflict', message: `action \`${id}\` is already ${action.status}` } });
  }
  if (body.parameters_hash !== action.parameters_hash) {
    return record(422, { error: { code: 'parameters_changed', message: 'the parameters changed since the action was proposed' } });
  }
  if (decision === 'confirm' && action.kind === 'recovery_request' && user.role === 'viewer') {
    // Refused requests do not spend the key's decision: the viewer may still reject.
    state.decisions.push({ actionId: id, decision, key, status: 403 });
    return sendError(response, 403, 'forbidden', 'approving a recovery needs an operator or admin');
  }
  action.decided_at = now;
  if (decision === 'reject') {
    action.status = 'rejected';
    action.result = null;
  } else if (action.kind === 'diagnostic_start') {
    action.status = 'executed';
    action.result = { diagnostic_task_id: `diagnostic_${randomBytes(4).toString('hex')}`, run_id: `run_${randomBytes(4).toString('hex')}`, status: 'waiting_for_graph' };
  } else {
    // As the real server by default: the requester's confirmation only submits the
    // recovery; a second person approves it from the queue.
    action.status = 'awaiting_approval';
    action.result = { awaiting_approval: true };
  }
  return record(200, { action: publicAction(action) });
}

/** GET /api/diagnostics/sources: the live sources and their health (admins only). */
function listSources(state, user, response) {
  if (user.role !== 'admin') return sendError(response, 403, 'forbidden', 'the data sources are for admins');
  return sendJson(response, 200, { configured: state.sources.length > 0, sources: state.sources });
}

/** GET /api/approvals: recovery requests awaiting approval (operators and admins only). */
function listApprovals(state, user, response) {
  if (user.role !== 'operator' && user.role !== 'admin') return sendError(response, 403, 'forbidden', 'approving a recovery needs an operator or admin');
  const waiting = [...state.actions.values()].filter((action) => action.status === 'awaiting_approval');
  const approvals = waiting.map((action) => ({
    id: action.id, target: action.target, reason: action.reason, parameters: action.parameters,
    parameters_hash: action.parameters_hash,
    requester: state.users.find((candidate) => candidate.id === action.owner_id)?.name ?? '',
    own: action.owner_id === user.id,
    diagnostic_task_id: action.parameters.diagnostic_task_id ?? '', incident_id: 'INC-1042',
    root_cause: {
      component: 'checkout-db', mechanism: 'connection_pool_exhaustion',
      trigger: { kind: 'deploy', ref: 'chg-4127' }, causalChain: [], confidence: 0.8, evidenceIds: ['ev-1'],
    },
    proposal: { action: 'rollback', changeRef: 'chg-4127', summary: 'Restart the checkout-db connection pooler' },
    expires_at: action.expires_at, created_at: action.created_at,
  }));
  return sendJson(response, 200, { approvals });
}

/**
 * POST /api/approvals/{id}/approve|reject {parameters_hash}: 403 for a viewer and for the
 * requester, 404 unless awaiting approval, 409 once decided, 422 for another hash.
 */
async function decideApproval(state, user, id, decision, request, response) {
  const body = await readJson(request);
  if (user.role !== 'operator' && user.role !== 'admin') return sendError(response, 403, 'forbidden', 'approving a recovery needs an operator or admin');
  const action = state.actions.get(id);
  if (!action || action.kind !== 'recovery_request' || action.status === 'pending') return sendError(response, 404, 'not_found', `approval \`${id}\` not found`);
  if (action.status !== 'awaiting_approval') return sendError(response, 409, 'conflict', `action \`${id}\` was already decided (${action.status})`);
  if (action.owner_id === user.id) return sendError(response, 403, 'forbidden', 'a recovery must be approved by someone other than the person who requested it');
  if (!body || body.parameters_hash !== action.parameters_hash) return sendError(response, 422, 'parameters_changed', 'the parameters changed since the action was proposed');
  action.decided_at = unixNow();
  if (decision === 'reject') {
    action.status = 'rejected';
    action.result = null;
  } else {
    action.status = 'confirmed';
    action.result = { approval_id: `approval_${randomBytes(4).toString('hex')}` };
  }
  state.decisions.push({ actionId: id, decision, key: null, status: 200, by: user.name });
  return sendJson(response, 200, { action: publicAction(action) });
}

// --- Server-Sent Events -------------------------------------------------------------------------

function streamEvents(state, options, run, url, request, response) {
  const lastEventId = Number.parseInt(request.headers['last-event-id'] ?? '', 10);
  const afterParam = Number.parseInt(url.searchParams.get('after') ?? '0', 10);
  let after = Number.isFinite(lastEventId) ? lastEventId : (Number.isFinite(afterParam) ? afterParam : 0);
  if (options.chaos && Number.isFinite(lastEventId)) after = Math.max(0, after - CHAOS_REPLAY_OVERLAP);
  if (process.env.MOCK_LOG) console.log(`events run=${run.id} after=${url.searchParams.get('after')} last-event-id=${request.headers['last-event-id'] ?? '-'} replay-from=${after}`);

  response.writeHead(200, {
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-store',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  response.write('retry: 500\n\n');
  state.streams.add(response);
  run.connections = (run.connections ?? 0) + 1;
  let liveWritten = 0;
  let open = true;
  const heartbeat = setInterval(() => response.write(': keep-alive\n\n'), HEARTBEAT_MS);
  const end = () => {
    if (!open) return;
    open = false;
    clearInterval(heartbeat);
    run.subscribers.delete(live);
    state.streams.delete(response);
    response.end();
  };
  const send = (event) => {
    if (!open || event.seq <= after) return false;
    response.write(`id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(event.data)}\n\n`);
    if (['run.completed', 'run.failed', 'run.cancelled'].includes(event.type)) end();
    return true;
  };
  function live(event) {
    if (!send(event) || !open) return;
    liveWritten += 1;
    // A stream that ends early, as when a proxy or the server drops it: the browser
    // reconnects with Last-Event-ID, and chaos replays a few events it already has.
    if (options.chaos && liveWritten >= CHAOS_DROP_AFTER_EVENTS) end();
  }
  for (const event of run.events) send(event);
  if (open) run.subscribers.add(live);
  request.on('close', end);
}

// --- Helpers ------------------------------------------------------------------------------------

async function readJson(request) {
  const chunks = [];
  let size = 0;
  for await (const chunk of request) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return null;
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function sendJson(response, status, body) {
  response.writeHead(status, { 'Content-Type': 'application/json' });
  response.end(JSON.stringify(body));
}

function sendError(response, status, code, message) {
  sendJson(response, status, { error: { code, message } });
}

function sameSecret(expected, given) {
  const a = Buffer.from(String(expected));
  const b = Buffer.from(String(given));
  return a.length === b.length && timingSafeEqual(a, b);
}

function randomToken() {
  return randomBytes(18).toString('base64url');
}

function unixNow() {
  return Math.floor(Date.now() / 1000);
}

// --- Command line ---------------------------------------------------------------------------

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  const portIndex = args.indexOf('--port');
  const port = portIndex === -1 ? Number(process.env.MOCK_PORT ?? 8099) : Number(args[portIndex + 1]);
  const mock = await startMockServer({ port, bootstrap: args.includes('--bootstrap'), chaos: args.includes('--chaos') });
  console.log(`mock Warden listening on ${mock.url}`);
  if (mock.bootstrapUrl) console.log(`create the first administrator: ${mock.bootstrapUrl}`);
  else console.log(`sign in as ${mock.state.users[0].name} / ${mock.state.users[0].password}`);
  const shutdown = () => mock.close().then(() => process.exit(0));
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
}
