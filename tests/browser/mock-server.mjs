// An in-memory stand-in for Warden's HTTP server, for working on the web UI and its browser
// test without building the Rust binary or loading a model. It serves web/ the way the real
// server does (`/` and `/assets/<file>`, with the same Content-Security-Policy) and
// implements the browser API: cookie sessions with a CSRF cookie, sign-in rate limiting, the
// first-administrator bootstrap, conversations, and runs whose answers stream as
// Server-Sent Events with gapless ids and Last-Event-ID replay.
//
//   node tests/browser/mock-server.mjs [--port 8099] [--bootstrap] [--chaos]
//
// --bootstrap starts with no accounts and prints the `#bootstrap=TOKEN` link; otherwise the
// account WARDEN_USER / WARDEN_PASSWORD (default alice / correct-horse) exists. --chaos drops
// every event stream after a few events and replays a few events twice on reconnect, so the
// UI's de-duplication is exercised. A message containing [[fail]], [[resume]] or [[slow]]
// makes its run fail, simulate a server restart, or stream slowly.

import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

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
    runs: new Map(),
    streams: new Set(),
    nextId: 1,
    bootstrapToken: null,
  };
  if (bootstrap) {
    state.bootstrapToken = randomToken();
  } else {
    state.users.push({ id: state.nextId++, name: user ?? process.env.WARDEN_USER ?? 'alice', password: password ?? process.env.WARDEN_PASSWORD ?? 'correct-horse', role: 'admin' });
  }
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
  if ((method === 'POST' || method === 'DELETE') && !csrfOk(session, request)) {
    return sendError(response, 403, 'csrf', 'missing or wrong X-CSRF-Token');
  }
  if ((method === 'POST' || method === 'DELETE') && !String(request.headers['content-type'] ?? '').startsWith('application/json')) {
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
    const mine = [...state.conversations.values()].filter((c) => c.userId === user.id)
      .sort((a, b) => b.updated_at - a.updated_at || b.id - a.id);
    return sendJson(response, 200, { conversations: mine.map(conversationSummary) });
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
    const messages = [...conversation.messages].sort((a, b) => a.turn - b.turn || (a.role === 'user' ? -1 : 1));
    return sendJson(response, 200, { ...conversationSummary(conversation), messages });
  }
  if ((match = route(/^\/api\/conversations\/(\d+)\/messages$/)) && method === 'POST') {
    const conversation = ownedConversation(state, user, match[1]);
    if (!conversation) return sendError(response, 404, 'not_found', 'no such conversation');
    const body = await readJson(request);
    if (!body || typeof body.content !== 'string' || body.content.trim() === '') {
      return sendError(response, 400, 'bad_request', 'content must be a non-empty string');
    }
    if (user.role === 'viewer') return sendError(response, 403, 'forbidden', 'viewers cannot send messages');
    return sendJson(response, 202, postMessage(state, conversation, body.content));
  }
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
  if ((match = route(/^\/api\/runs\/(\d+)\/events$/)) && method === 'GET') {
    const run = ownedRun(state, user, match[1]);
    if (!run) return sendError(response, 404, 'not_found', 'no such run');
    return streamEvents(state, options, run, url, request, response);
  }
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
  if (!user || !sameSecret(user.password, body.password)) {
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
  const user = { id: state.nextId++, name: body.name.trim(), password: body.password, role: 'admin' };
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
  return run && ownedConversation(state, user, run.conversation_id) ? run : null;
}

function publicRun(run) {
  const { id, conversation_id, turn, status, failure_reason, attempts, created_at, updated_at } = run;
  return { id, conversation_id, turn, status, failure_reason, attempts, created_at, updated_at };
}

function postMessage(state, conversation, content) {
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
  simulateRun(state, conversation, run, content);
  return { run_id: run.id, message_id: message.id, turn };
}

/** Schedules the run's fake generation: start, ~40 deltas, then the terminal event. */
function simulateRun(state, conversation, run, content) {
  const chunks = splitIntoChunks(answerFor(content), DELTA_COUNT);
  const interval = content.includes('[[slow]]') ? SLOW_DELTA_INTERVAL_MS : DELTA_INTERVAL_MS;
  const schedule = (delay, action) => run.timers.push(setTimeout(action, delay));
  schedule(QUEUE_DELAY_MS, () => {
    run.status = 'running';
    run.attempts = 1;
    emit(state, run, 'run.started', { attempt: 1 });
  });
  chunks.forEach((chunk, index) => {
    schedule(QUEUE_DELAY_MS + (index + 1) * interval, () => {
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
  schedule(QUEUE_DELAY_MS + (chunks.length + 1) * interval, () => {
    const now = unixNow();
    const message = { id: state.nextId++, turn: run.turn, role: 'assistant', content: run.answer, run_id: run.id, created_at: now };
    conversation.messages.push(message);
    conversation.updated_at = now;
    finishRun(state, run, 'completed', {
      message_id: message.id,
      finish_reason: 'stop',
      usage: { prompt_tokens: 42 + [...content].length, completion_tokens: chunks.length * 3 },
    });
  });
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
