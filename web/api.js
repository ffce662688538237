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

/** The value of the readable `warden_csrf` cookie, or null before sign-in. */
export function csrfToken() {
  for (const part of document.cookie.split(';')) {
    const separator = part.indexOf('=');
    if (separator === -1) continue;
    if (part.slice(0, separator).trim() === 'warden_csrf') return decodeURIComponent(part.slice(separator + 1).trim());
  }
  return null;
}

/**
 * Sends one request and returns the parsed JSON body (null for 204). State-changing methods
 * always carry `Content-Type: application/json` and `X-CSRF-Token`. With `signingIn` set, a
 * 401 is the caller's to handle (bad credentials) rather than a sign that the session ended.
 */
export async function request(method, path, { body, signingIn = false } = {}) {
  const headers = { Accept: 'application/json' };
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

export async function listConversations() {
  const data = await request('GET', '/api/conversations');
  return data.conversations;
}

export function createConversation(title) {
  return request('POST', '/api/conversations', { body: title ? { title } : {} });
}

export function getConversation(id) {
  return request('GET', `/api/conversations/${encodeURIComponent(id)}`);
}

/** Posts a user message; resolves to {run_id, message_id, turn}. */
export function postMessage(conversationId, content) {
  return request('POST', `/api/conversations/${encodeURIComponent(conversationId)}/messages`, { body: { content } });
}

export function getRun(id) {
  return request('GET', `/api/runs/${encodeURIComponent(id)}`);
}

export function cancelRun(id) {
  return request('POST', `/api/runs/${encodeURIComponent(id)}/cancel`);
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
