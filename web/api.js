// The HTTP client for Warden's JSON API. It owns the wire: URLs, the session cookie (sent by
// the browser), the CSRF header on every state-changing request, JSON bodies, and turning
// error responses ({"error":{"code","message"}}) into ApiError. Nothing here touches the DOM.

/** An API failure: `status` is the HTTP status (0 when the server could not be reached). */
export class ApiError extends Error {
  constructor(status, code, message, retryAfterSeconds = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

let unauthorizedHandler = null;

/** Called with the ApiError when a signed-in request answers 401 (the session ended). */
export function onUnauthorized(handler) {
  unauthorizedHandler = handler;
}

/** Names of the readable CSRF cookie: `__Host-` prefixed when the server's cookies are secure. */
const CSRF_COOKIES = ['__Host-warden_csrf', 'warden_csrf'];

/** The value of the readable CSRF cookie (the `__Host-` one first), or null before sign-in. */
export function csrfToken() {
  const values = new Map();
  for (const part of document.cookie.split(';')) {
    const separator = part.indexOf('=');
    if (separator === -1) continue;
    const name = part.slice(0, separator).trim();
    if (CSRF_COOKIES.includes(name) && !values.has(name)) values.set(name, decodeURIComponent(part.slice(separator + 1).trim()));
  }
  for (const name of CSRF_COOKIES) {
    if (values.get(name)) return values.get(name);
  }
  return null;
}

/**
 * Sends one request and returns the parsed JSON body (null for 204). State-changing methods
 * always carry `Content-Type: application/json` and `X-CSRF-Token`. With `signingIn` set, a
 * 401 is the caller's to handle (bad credentials) rather than a sign that the session ended.
 * `extraHeaders` adds headers such as `Idempotency-Key`.
 */
export async function request(method, path, { body, signingIn = false, extraHeaders = {} } = {}) {
  const headers = { ...extraHeaders, Accept: 'application/json' };
  const options = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET' && method !== 'HEAD') {
    headers['Content-Type'] = 'application/json';
    const token = csrfToken();
    if (token) headers['X-CSRF-Token'] = token;
    options.body = JSON.stringify(body ?? {});
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    throw new ApiError(0, 'network', error instanceof Error ? error.message : String(error));
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (response.ok) return data;
  const error = new ApiError(
    response.status,
    data?.error?.code ?? `http_${response.status}`,
    data?.error?.message ?? response.statusText,
    retryAfter(response.headers.get('Retry-After')),
  );
  if (response.status === 401 && !signingIn && unauthorizedHandler) unauthorizedHandler(error);
  throw error;
}

/** The signed-in user, or null when there is no session. */
export async function currentUser() {
  try {
    const data = await request('GET', '/api/me', { signingIn: true });
    return data.user;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return null;
    throw error;
  }
}

export async function login(name, password) {
  const data = await request('POST', '/api/login', { body: { name, password }, signingIn: true });
  return data.user;
}

export async function logout() {
  await request('POST', '/api/logout', { signingIn: true });
}

export async function bootstrap(token, name, password) {
  const data = await request('POST', '/api/bootstrap', { body: { token, name, password }, signingIn: true });
  return data.user;
}

/** One page of conversations, newest first: {conversations, next_before} (null on the last). */
export function listConversations(before = null) {
  const query = before ? `?before=${encodeURIComponent(before)}` : '';
  return request('GET', `/api/conversations${query}`);
}

export function createConversation(title) {
  return request('POST', '/api/conversations', { body: title ? { title } : {} });
}

export function getConversation(id) {
  return request('GET', `/api/conversations/${encodeURIComponent(id)}`);
}

/** Posts a user message; resolves to {run_id, message_id, turn}. */
export function postMessage(conversationId, content, { keepOriginal = false } = {}) {
  const body = keepOriginal ? { content, keep_original: true } : { content };
  return request('POST', `/api/conversations/${encodeURIComponent(conversationId)}/messages`, { body });
}

/** The text of one of your messages as typed, kept because you asked: {message_id, content}. */
export function getMessageOriginal(conversationId, messageId) {
  return request('GET', `/api/conversations/${encodeURIComponent(conversationId)}/messages/${encodeURIComponent(messageId)}/original`);
}

/** A conversation's memory: {version, through_message_id, status, degraded_reason, items, compaction}. */
export function getMemory(conversationId) {
  return request('GET', `/api/conversations/${encodeURIComponent(conversationId)}/memory`);
}

/** Removes one memory item (204). */
export function removeMemoryItem(conversationId, itemId) {
  return request('DELETE', `/api/conversations/${encodeURIComponent(conversationId)}/memory/${encodeURIComponent(itemId)}`);
}

/** Confirms an item the user stated; resolves to the item, now `user_confirmed` (409 for any other). */
export async function confirmMemoryItem(conversationId, itemId) {
  const data = await request('POST', `/api/conversations/${encodeURIComponent(conversationId)}/memory/${encodeURIComponent(itemId)}/confirm`);
  return data?.item ?? data;
}

export function getRun(id) {
  return request('GET', `/api/runs/${encodeURIComponent(id)}`);
}

export function cancelRun(id) {
  return request('POST', `/api/runs/${encodeURIComponent(id)}/cancel`);
}

/** An action the agent proposed: {id, kind, status, result, …}. */
export async function getAction(id) {
  const data = await request('GET', `/api/actions/${encodeURIComponent(id)}`);
  return data?.action ?? data;
}

/**
 * Confirms or rejects a proposed action (`decision` is "confirm" or "reject"), repeating the
 * parameters hash the person saw. Each click sends a fresh Idempotency-Key, so a retried
 * request is not decided twice. Resolves to the decided action {id, status, result}.
 */
export async function decideAction(id, decision, parametersHash) {
  if (decision !== 'confirm' && decision !== 'reject') throw new Error(`unknown decision ${decision}`);
  const data = await request('POST', `/api/actions/${encodeURIComponent(id)}/${decision}`, {
    body: { parameters_hash: parametersHash },
    extraHeaders: { 'Idempotency-Key': randomUuid() },
  });
  return data?.action ?? data;
}

/** Recovery requests awaiting a second person's approval (operators and admins). */
/** The live diagnostic sources and their health (admins): {configured, sources}. */
export async function listSources() {
  const data = await request('GET', '/api/diagnostics/sources');
  return {
    configured: data?.configured === true,
    sources: Array.isArray(data?.sources) ? data.sources : [],
  };
}

export async function listApprovals() {
  const data = await request('GET', '/api/approvals');
  return Array.isArray(data?.approvals) ? data.approvals : [];
}

/** Approves (`approve`) or rejects (`reject`) a recovery request awaiting approval. */
export async function decideApproval(id, decision, parametersHash) {
  if (decision !== 'approve' && decision !== 'reject') throw new Error(`unknown decision ${decision}`);
  const data = await request('POST', `/api/approvals/${encodeURIComponent(id)}/${decision}`, {
    body: { parameters_hash: parametersHash },
  });
  return data?.action ?? data;
}

/** Incidents, newest first: [{id, title, service, severity, status, …}]. */
export async function listIncidents() {
  const data = await request('GET', '/api/incidents');
  return Array.isArray(data?.incidents) ? data.incidents : [];
}

/** The caller's diagnostic tasks, newest first (without their reports). */
export async function listDiagnostics() {
  const data = await request('GET', '/api/diagnostics');
  return Array.isArray(data?.tasks) ? data.tasks : [];
}

/** One diagnostic task with its `report` (null until the task completed). */
export function getDiagnostic(id) {
  return request('GET', `/api/diagnostics/${encodeURIComponent(id)}`);
}

/** Starts diagnosing an incident; resolves to {diagnostic_task_id, run_id, status, events}. */
export function startDiagnostic(incidentId) {
  return request('POST', '/api/diagnostics', { body: { incident_id: incidentId } });
}

/** A random (version 4) UUID; crypto.randomUUID is missing outside secure contexts. */
export function randomUuid() {
  if (typeof crypto.randomUUID === 'function' && globalThis.isSecureContext) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((byte) => byte.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The URL of a run's Server-Sent Events stream, replaying events after `after`. */
export function runEventsUrl(id, after = 0) {
  return `/api/runs/${encodeURIComponent(id)}/events?after=${encodeURIComponent(after)}`;
}

function retryAfter(header) {
  if (header === null) return null;
  const seconds = Number.parseInt(header, 10);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(header);
  return Number.isFinite(date) ? Math.max(0, Math.ceil((date - Date.now()) / 1000)) : null;
}

// --- Knowledge bases ---------------------------------------------------------------------------

/** The knowledge bases the caller may read: [{name, documents, chunks, created_at, synced_at, readers, root?}]. */
export async function listKnowledgeBases() {
  const data = await request('GET', '/api/kb');
  return Array.isArray(data?.knowledge_bases) ? data.knowledge_bases : [];
}

/** Registers a folder (admins); resolves to the new knowledge base. */
export async function addKnowledgeBase(name, path, readers) {
  const data = await request('POST', '/api/kb', { body: { name, path, readers } });
  return data?.knowledge_base ?? data;
}

/** Replaces a knowledge base's readers (admins); resolves to the knowledge base. */
export async function setKnowledgeBaseReaders(name, readers) {
  const data = await request('PUT', `/api/kb/${encodeURIComponent(name)}/readers`, { body: { readers } });
  return data?.knowledge_base ?? data;
}

export function removeKnowledgeBase(name) {
  return request('DELETE', `/api/kb/${encodeURIComponent(name)}`);
}

export function cancelKnowledgeBaseSync(name) {
  return request('POST', `/api/kb/${encodeURIComponent(name)}/sync/cancel`);
}

/**
 * Starts a sync and reads its Server-Sent Events (`progress`, then `completed` or `failed`)
 * from the POST's response body, calling `onEvent({type, data})` for each. Resolves when the
 * stream ends; `signal` stops reading (the server's sync goes on). A refused start (409 while
 * another sync runs, 403, 404) rejects with an ApiError before any event.
 */
export async function syncKnowledgeBase(name, { onEvent, signal } = {}) {
  const headers = { Accept: 'text/event-stream', 'Content-Type': 'application/json' };
  const token = csrfToken();
  if (token) headers['X-CSRF-Token'] = token;
  let response;
  try {
    response = await fetch(`/api/kb/${encodeURIComponent(name)}/sync`, {
      method: 'POST', headers, body: '{}', credentials: 'same-origin', cache: 'no-store', signal,
    });
  } catch (error) {
    if (signal?.aborted) return;
    throw new ApiError(0, 'network', error instanceof Error ? error.message : String(error));
  }
  if (!response.ok) {
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    const error = new ApiError(response.status, data?.error?.code ?? `http_${response.status}`, data?.error?.message ?? response.statusText);
    if (response.status === 401 && unauthorizedHandler) unauthorizedHandler(error);
    throw error;
  }
  if (!response.body) return;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseServerEvent(block);
        if (event) onEvent?.(event);
      }
    }
  } catch (error) {
    if (signal?.aborted) return;
    throw new ApiError(0, 'network', error instanceof Error ? error.message : String(error));
  }
}

/** One Server-Sent Events block as {type, data}; null for comments and unparsable data. */
export function parseServerEvent(block) {
  let type = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return null;
  try {
    return { type, data: JSON.parse(data.join('\n')) };
  } catch {
    return null;
  }
}

/** Searches knowledge bases: [{chunk_id, score, text, citation, bm25, vector}]. */
export async function searchKnowledge({ q, kb = '', mode = 'hybrid', limit = 10 }) {
  const params = new URLSearchParams({ q, mode, limit: String(limit) });
  if (kb) params.set('kb', kb);
  const data = await request('GET', `/api/kb/search?${params}`);
  return Array.isArray(data?.hits) ? data.hits : [];
}

/** A passage in its document context: {passage, before, after}. */
export function getPassage(chunkId) {
  return request('GET', `/api/kb/passages/${encodeURIComponent(chunkId)}`);
}

// --- Users, groups, tokens and the audit log ------------------------------------------------------

export async function listUsers() {
  const data = await request('GET', '/api/users');
  return Array.isArray(data?.users) ? data.users : [];
}

export async function createUser(user) {
  const data = await request('POST', '/api/users', { body: user });
  return data?.user ?? data;
}

/** Changes a user's role, disabled flag and/or groups; resolves to the user. */
export async function updateUser(name, changes) {
  const data = await request('PATCH', `/api/users/${encodeURIComponent(name)}`, { body: changes });
  return data?.user ?? data;
}

export function resetPassword(name, password) {
  return request('POST', `/api/users/${encodeURIComponent(name)}/password`, { body: { password } });
}

export async function listGroups() {
  const data = await request('GET', '/api/groups');
  return Array.isArray(data?.groups) ? data.groups : [];
}

export async function createGroup(name) {
  const data = await request('POST', '/api/groups', { body: { name } });
  return data?.group ?? data;
}

export function removeGroup(name) {
  return request('DELETE', `/api/groups/${encodeURIComponent(name)}`);
}

/** API tokens' metadata: the caller's, or (admins) `user`'s. */
export async function listTokens(user = null) {
  const data = await request('GET', user ? `/api/tokens?user=${encodeURIComponent(user)}` : '/api/tokens');
  return Array.isArray(data?.tokens) ? data.tokens : [];
}

/** Creates a token; resolves to {id, label, secret} — the only time the secret is seen. */
export function createToken(label, user = null) {
  return request('POST', '/api/tokens', { body: user ? { label, user } : { label } });
}

export function revokeToken(id) {
  return request('DELETE', `/api/tokens/${encodeURIComponent(id)}`);
}

/** One page of the audit log: {entries, next_before}; `filters` holds actor, action, since, until, before, limit. */
export async function readAudit(filters = {}) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(filters)) {
    if (value !== null && value !== undefined && value !== '') params.set(key, String(value));
  }
  const query = params.toString();
  const data = await request('GET', query ? `/api/audit?${query}` : '/api/audit');
  return { entries: Array.isArray(data?.entries) ? data.entries : [], next_before: data?.next_before ?? null };
}
