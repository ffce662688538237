// The administration API of the in-memory mock server (see mock-server.mjs): knowledge bases
// with readers (`GET/POST /api/kb`, `PUT /api/kb/{name}/readers`, `DELETE /api/kb/{name}`),
// a sync that streams progress as Server-Sent Events (`POST /api/kb/{name}/sync`, a second
// one at once → 409, `POST /api/kb/{name}/sync/cancel`), search with per-retriever ranks and
// passages in their document's context (`GET /api/kb/search`, `GET /api/kb/passages/{id}`),
// users, groups, API tokens and the audit log with filters and paging. Each change writes an
// audit row. Folders may only be added under ALLOWED_ROOT; the sync of any knowledge base
// plays the same ten files, one of them skipped and one failed, `state.admin.syncStepMs` apart;
// `state.admin.syncHoldAt` holds it after that many files until it is cancelled.

import { randomBytes } from 'node:crypto';

export const ALLOWED_ROOT = '/srv/kb';
export const HOSTILE = '<img src=x onerror="window.__xss=1">';
const ROLE_RANK = { viewer: 0, operator: 1, admin: 2 };
const READER = /^(role:(admin|operator|viewer)|group:[\p{L}\p{N}._-]{1,64}|user:[A-Za-z0-9_.-]{1,64})$/u;
const USER_NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const GROUP_NAME = /^[\p{L}\p{N}._-]{1,64}$/u;
const SYNC_FILES = 10;
const SYNC_STEP_MS = 150;
const AUDIT_SEED_ROWS = 120;
const MAX_AUDIT_PAGE = 1000;

/** The administration part of the mock's state. `users` is the mock's own user list. */
export function adminState(users) {
  const now = unixNow();
  for (const user of users) {
    user.disabled = false;
    user.groups = user.groups ?? [];
    user.created_at = now - 86_400;
  }
  const state = {
    kbs: new Map(),
    chunks: new Map(),
    groups: new Map([['ops', { name: 'ops', created_at: now - 3600 }], ['hr', { name: 'hr', created_at: now - 3600 }]]),
    tokens: [],
    audit: [],
    syncs: new Map(),
    syncStepMs: SYNC_STEP_MS,
    syncHoldAt: null,
    nextChunk: 1000,
  };
  addKb(state, 'ops-runbooks', `${ALLOWED_ROOT}/ops`, ['role:viewer'], now - 7200);
  addKb(state, 'hr-private', `${ALLOWED_ROOT}/hr`, ['group:hr'], now - 7200);
  addChunks(state, 'ops-runbooks', 'disk/full-disk.md', 'When a disk is full', [
    [101, ['Disk', 'When a disk is full', 'First checks'], [12, 24], 'Run `df -h` to see which filesystem is full, then `df -i` for inodes.'],
    [102, ['Disk', 'When a disk is full', 'Freeing space'], [25, 40], 'Find the largest directories with du, and deleted files still open with lsof +L1.'],
    [103, ['Disk', 'When a disk is full', 'Afterwards'], [41, 50], 'Add an alert at 85% so it does not happen again.'],
  ]);
  addChunks(state, 'ops-runbooks', 'logging/journald.md', 'Journald retention', [
    [201, ['Logging', 'Retention'], [1, 8], 'Journald keeps logs under /var/log/journal.'],
    [202, ['Logging', 'Retention', 'Vacuum'], [9, 20], 'journalctl --vacuum-size=500M keeps the newest 500 MB of journal files and deletes the rest.'],
    [203, ['Logging', '磁盘满了怎么办'], [21, 30], `磁盘满了：先清理日志。${HOSTILE}`],
  ]);
  addChunks(state, 'hr-private', 'salaries.md', 'Salaries', [[301, ['HR', 'Pay'], [1, 5], 'Salary bands are confidential.']]);
  const actors = ['alice', 'otto', 'vera', 'system'];
  const actions = ['auth.login', 'kb.sync', 'run.start', 'token.create', 'alert.receive'];
  for (let index = 0; index < AUDIT_SEED_ROWS; index += 1) {
    state.audit.push({
      id: index + 1, at: now - (AUDIT_SEED_ROWS - index) * 60, actor: actors[index % actors.length],
      action: actions[index % actions.length], target: index % 3 === 0 ? null : `target-${index + 1}`,
      outcome: index % 17 === 0 ? 'denied' : 'success', detail: null,
    });
  }
  return state;
}

function addKb(state, name, root, readers, createdAt) {
  state.kbs.set(name, { name, root, readers: [...readers].sort(), created_at: createdAt, synced_at: createdAt + 60, documents: 0, chunks: 0 });
}

function addChunks(state, kb, path, title, chunks) {
  for (const [id, heading_path, [start, end], text] of chunks) {
    state.chunks.set(id, { chunk_id: id, kb, path, title, heading_path, location: { kind: 'lines', start, end }, text });
  }
  refreshCounts(state, kb);
}

function refreshCounts(state, kbName) {
  const kb = state.kbs.get(kbName);
  if (!kb) return;
  const chunks = [...state.chunks.values()].filter((chunk) => chunk.kb === kbName);
  kb.chunks = chunks.length;
  kb.documents = new Set(chunks.map((chunk) => chunk.path)).size;
}

/** Stops every sync still playing (when the mock closes). */
export function stopAdmin(state) {
  for (const sync of state.syncs.values()) clearInterval(sync.timer);
  state.syncs.clear();
}

/** Whether `user` may read a knowledge base with these readers. */
export function mayRead(user, readers) {
  if (user.role === 'admin') return true;
  return readers.some((reader) => {
    const [kind, name] = [reader.slice(0, reader.indexOf(':')), reader.slice(reader.indexOf(':') + 1)];
    if (kind === 'role') return ROLE_RANK[user.role] >= ROLE_RANK[name];
    if (kind === 'group') return user.groups.includes(name);
    return kind === 'user' && name === user.name;
  });
}

/**
 * Answers an administration request; returns false when the path is not one of these.
 * `helpers` holds the mock's readJson, sendJson and sendError, `sessions` its session map.
 */
export async function handleAdmin(mock, user, method, url, request, response, helpers) {
  const state = mock.admin;
  const path = url.pathname;
  const { readJson, sendJson, sendError } = helpers;
  const audit = (action, target, detail = null) => state.audit.push({
    id: state.audit.length + 1, at: unixNow(), actor: user.name, action, target, outcome: 'success', detail,
  });
  const admin = user.role === 'admin';
  const forbidden = () => sendError(response, 403, 'forbidden', `the ${user.role} role may not do this`);
  let match;

  // --- Knowledge bases ---
  if (path === '/api/kb' && method === 'GET') {
    const visible = [...state.kbs.values()].filter((kb) => mayRead(user, kb.readers))
      .sort((a, b) => a.name.localeCompare(b.name))
      .map((kb) => publicKb(kb, admin));
    return sendJson(response, 200, { knowledge_bases: visible });
  }
  if (path === '/api/kb' && method === 'POST') {
    const body = await readJson(request);
    if (!admin) return forbidden();
    if (!body || typeof body.name !== 'string' || typeof body.path !== 'string') return sendError(response, 400, 'invalid_json', 'name and path are required');
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(body.name)) return sendError(response, 400, 'invalid_value', `knowledge-base name \`${body.name}\` must be letters, digits, - and _`);
    if (state.kbs.has(body.name)) return sendError(response, 409, 'conflict', `knowledge base \`${body.name}\` already exists`);
    if (!(body.path === ALLOWED_ROOT || body.path.startsWith(`${ALLOWED_ROOT}/`)) || body.path.includes('..')) {
      return sendError(response, 403, 'path_not_allowed', `\`${body.path}\` is outside the folders this server may read (${ALLOWED_ROOT})`);
    }
    const readers = Array.isArray(body.readers) ? body.readers : [];
    const bad = readers.find((reader) => typeof reader !== 'string' || !READER.test(reader));
    if (bad !== undefined) return sendError(response, 400, 'invalid_value', `reader \`${bad}\` must be role:NAME, group:NAME or user:NAME`);
    addKb(state, body.name, body.path, readers, unixNow());
    const kb = state.kbs.get(body.name);
    kb.synced_at = null;
    audit('kb.add', body.name);
    return sendJson(response, 201, { knowledge_base: publicKb(kb, true) });
  }
  if ((match = /^\/api\/kb\/passages\/([^/]+)$/.exec(path)) && method === 'GET') {
    const chunk = state.chunks.get(Number(decodeURIComponent(match[1])));
    const kb = chunk && state.kbs.get(chunk.kb);
    if (!chunk || !kb || !mayRead(user, kb.readers)) return sendError(response, 404, 'not_found', `passage \`${match[1]}\` not found`);
    const siblings = [...state.chunks.values()].filter((other) => other.kb === chunk.kb && other.path === chunk.path)
      .sort((a, b) => a.location.start - b.location.start);
    const index = siblings.indexOf(chunk);
    const brief = (other) => ({ chunk_id: other.chunk_id, text: other.text });
    return sendJson(response, 200, {
      passage: { ...chunk },
      before: siblings.slice(Math.max(0, index - 2), index).map(brief),
      after: siblings.slice(index + 1, index + 3).map(brief),
    });
  }
  if (path === '/api/kb/search' && method === 'GET') return search(state, user, url, response, helpers);
  if ((match = /^\/api\/kb\/([^/]+)\/readers$/.exec(path)) && method === 'PUT') {
    const body = await readJson(request);
    if (!admin) return forbidden();
    const kb = state.kbs.get(decodeURIComponent(match[1]));
    if (!kb) return sendError(response, 404, 'not_found', `knowledge base \`${decodeURIComponent(match[1])}\` not found`);
    const readers = Array.isArray(body?.readers) ? body.readers : null;
    if (!readers) return sendError(response, 400, 'invalid_json', 'readers must be a list');
    for (const reader of readers) {
      if (typeof reader !== 'string' || !READER.test(reader)) return sendError(response, 400, 'invalid_value', `reader \`${reader}\` must be role:NAME, group:NAME or user:NAME`);
      const [kind, name] = [reader.slice(0, reader.indexOf(':')), reader.slice(reader.indexOf(':') + 1)];
      if (kind === 'group' && !state.groups.has(name)) return sendError(response, 404, 'not_found', `group \`${name}\` not found`);
      if (kind === 'user' && !mock.users.some((candidate) => candidate.name === name)) return sendError(response, 404, 'not_found', `user \`${name}\` not found`);
    }
    kb.readers = [...new Set(readers)].sort();
    audit('kb.readers', kb.name, { readers: kb.readers });
    return sendJson(response, 200, { knowledge_base: publicKb(kb, true) });
  }
  if ((match = /^\/api\/kb\/([^/]+)\/sync$/.exec(path)) && method === 'POST') {
    await readJson(request);
    return startSync(state, user, decodeURIComponent(match[1]), audit, request, response, helpers);
  }
  if ((match = /^\/api\/kb\/([^/]+)\/sync\/cancel$/.exec(path)) && method === 'POST') {
    await readJson(request);
    if (user.role === 'viewer') return forbidden();
    const sync = state.syncs.get(decodeURIComponent(match[1]));
    if (!sync) return sendError(response, 404, 'not_found', 'no sync is running');
    sync.cancelled = true;
    audit('kb.sync_cancel', sync.name);
    response.writeHead(202, { 'Content-Type': 'application/json' }).end('{}');
    return true;
  }
  if ((match = /^\/api\/kb\/([^/]+)$/.exec(path)) && method === 'DELETE') {
    await readJson(request);
    if (!admin) return forbidden();
    const name = decodeURIComponent(match[1]);
    if (!state.kbs.delete(name)) return sendError(response, 404, 'not_found', `knowledge base \`${name}\` not found`);
    for (const [id, chunk] of state.chunks) if (chunk.kb === name) state.chunks.delete(id);
    audit('kb.remove', name);
    response.writeHead(204).end();
    return true;
  }

  // --- Users and groups ---
  if (path.startsWith('/api/users') || path.startsWith('/api/groups')) {
    if (!admin) {
      await readJson(request);
      return forbidden();
    }
    return usersAndGroups(mock, user, method, path, request, response, helpers, audit);
  }

  // --- Tokens ---
  if (path === '/api/tokens' && method === 'GET') {
    const name = url.searchParams.get('user') ?? user.name;
    if (name !== user.name && !admin) return forbidden();
    const owner = mock.users.find((candidate) => candidate.name === name);
    if (!owner) return sendError(response, 404, 'not_found', `user \`${name}\` not found`);
    const tokens = state.tokens.filter((token) => token.userId === owner.id).reverse().map(publicToken);
    return sendJson(response, 200, { tokens });
  }
  if (path === '/api/tokens' && method === 'POST') {
    const body = await readJson(request);
    const name = typeof body?.user === 'string' ? body.user : user.name;
    if (name !== user.name && !admin) return forbidden();
    const owner = mock.users.find((candidate) => candidate.name === name);
    if (!owner) return sendError(response, 404, 'not_found', `user \`${name}\` not found`);
    const label = typeof body?.label === 'string' ? body.label : '';
    if (!label.trim() || [...label].length > 100) return sendError(response, 400, 'invalid_value', 'a token label is 1 to 100 characters, without control characters');
    const token = { id: `tok_${randomBytes(6).toString('hex')}`, userId: owner.id, label, created_at: unixNow(), revoked_at: null, secret: `wdn_${randomBytes(32).toString('hex')}` };
    state.tokens.push(token);
    audit('token.create', token.id, { user: owner.name, label });
    return sendJson(response, 201, { id: token.id, label, user: owner.name, secret: token.secret });
  }
  if ((match = /^\/api\/tokens\/([^/]+)$/.exec(path)) && method === 'DELETE') {
    await readJson(request);
    const id = decodeURIComponent(match[1]);
    const token = state.tokens.find((candidate) => candidate.id === id);
    if (!token || (token.userId !== user.id && !admin)) return sendError(response, 404, 'not_found', `token \`${id}\` not found`);
    token.revoked_at = token.revoked_at ?? unixNow();
    audit('token.revoke', id);
    response.writeHead(204).end();
    return true;
  }

  // --- Audit ---
  if (path === '/api/audit' && method === 'GET') {
    if (!admin) return forbidden();
    return readAudit(state, url, response, helpers);
  }
  return false;
}

async function usersAndGroups(mock, user, method, path, request, response, { readJson, sendJson, sendError }, audit) {
  const state = mock.admin;
  let match;
  const findUser = (name) => mock.users.find((candidate) => candidate.name === name);
  if (path === '/api/users' && method === 'GET') {
    const users = [...mock.users].sort((a, b) => a.name.localeCompare(b.name)).map(publicUser);
    return sendJson(response, 200, { users });
  }
  if (path === '/api/users' && method === 'POST') {
    const body = await readJson(request);
    if (!body || typeof body.name !== 'string' || typeof body.password !== 'string') return sendError(response, 400, 'invalid_json', 'name, role and password are required');
    if (!USER_NAME.test(body.name)) return sendError(response, 400, 'invalid_value', 'a user name is 1 to 64 characters of A-Z, a-z, 0-9, `_`, `.` and `-`');
    if (!(body.role in ROLE_RANK)) return sendError(response, 400, 'invalid_json', `unknown variant \`${body.role}\`, expected one of admin, operator, viewer`);
    if ([...body.password].length < 8) return sendError(response, 400, 'invalid_value', 'a password is 8 to 1024 characters');
    if (findUser(body.name)) return sendError(response, 409, 'conflict', `user \`${body.name}\` already exists`);
    const groups = Array.isArray(body.groups) ? body.groups : [];
    const missing = groups.find((group) => !state.groups.has(group));
    if (missing !== undefined) return sendError(response, 404, 'not_found', `group \`${missing}\` not found`);
    const created = { id: mock.nextId(), name: body.name, password: body.password, role: body.role, disabled: false, groups: [...new Set(groups)].sort(), created_at: unixNow() };
    mock.users.push(created);
    audit('user.create', created.name, { role: created.role, groups: created.groups });
    return sendJson(response, 201, { user: publicUser(created) });
  }
  if ((match = /^\/api\/users\/([^/]+)$/.exec(path)) && method === 'PATCH') {
    const body = await readJson(request);
    const target = findUser(decodeURIComponent(match[1]));
    if (!target) return sendError(response, 404, 'not_found', `user \`${decodeURIComponent(match[1])}\` not found`);
    if (!body || typeof body !== 'object') return sendError(response, 400, 'invalid_json', 'expected an object');
    if (target.id === user.id && body.role !== undefined && body.role !== 'admin') return sendError(response, 409, 'conflict', 'you cannot change your own role; another admin can');
    if (target.id === user.id && body.disabled === true) return sendError(response, 409, 'conflict', 'you cannot disable your own account; another admin can');
    if (body.role !== undefined && !(body.role in ROLE_RANK)) return sendError(response, 400, 'invalid_json', `unknown variant \`${body.role}\``);
    if (body.groups !== undefined) {
      const missing = (Array.isArray(body.groups) ? body.groups : []).find((group) => !state.groups.has(group));
      if (missing !== undefined) return sendError(response, 404, 'not_found', `group \`${missing}\` not found`);
    }
    if (body.role !== undefined && body.role !== target.role) {
      audit('user.role', target.name, { from: target.role, to: body.role });
      target.role = body.role;
    }
    if (typeof body.disabled === 'boolean' && body.disabled !== target.disabled) {
      target.disabled = body.disabled;
      if (target.disabled) {
        endSessions(mock, target);
        for (const token of state.tokens) if (token.userId === target.id) token.revoked_at = token.revoked_at ?? unixNow();
      }
      audit(target.disabled ? 'user.disable' : 'user.enable', target.name);
    }
    if (Array.isArray(body.groups)) {
      const groups = [...new Set(body.groups)].sort();
      if (JSON.stringify(groups) !== JSON.stringify(target.groups)) audit('user.groups', target.name, { from: target.groups, to: groups });
      target.groups = groups;
    }
    return sendJson(response, 200, { user: publicUser(target) });
  }
  if ((match = /^\/api\/users\/([^/]+)\/password$/.exec(path)) && method === 'POST') {
    const body = await readJson(request);
    const target = findUser(decodeURIComponent(match[1]));
    if (!target) return sendError(response, 404, 'not_found', `user \`${decodeURIComponent(match[1])}\` not found`);
    if (typeof body?.password !== 'string' || [...body.password].length < 8) return sendError(response, 400, 'invalid_value', 'a password is 8 to 1024 characters');
    target.password = body.password;
    endSessions(mock, target);
    audit('user.password_reset', target.name);
    response.writeHead(204).end();
    return true;
  }
  if (path === '/api/groups' && method === 'GET') {
    const groups = [...state.groups.values()].sort((a, b) => a.name.localeCompare(b.name)).map((group) => ({
      name: group.name,
      members: mock.users.filter((candidate) => candidate.groups.includes(group.name)).map((member) => member.name).sort(),
      created_at: group.created_at,
    }));
    return sendJson(response, 200, { groups });
  }
  if (path === '/api/groups' && method === 'POST') {
    const body = await readJson(request);
    const name = typeof body?.name === 'string' ? body.name : '';
    if (!GROUP_NAME.test(name)) return sendError(response, 400, 'invalid_value', `group name \`${name}\` must be 1–64 letters, digits, \`.\`, \`_\` or \`-\``);
    if (state.groups.has(name)) return sendError(response, 409, 'conflict', `group \`${name}\` already exists`);
    state.groups.set(name, { name, created_at: unixNow() });
    audit('group.create', name);
    return sendJson(response, 201, { group: { name, members: [], created_at: unixNow() } });
  }
  if ((match = /^\/api\/groups\/([^/]+)$/.exec(path)) && method === 'DELETE') {
    await readJson(request);
    const name = decodeURIComponent(match[1]);
    if (!state.groups.delete(name)) return sendError(response, 404, 'not_found', `group \`${name}\` not found`);
    for (const member of mock.users) member.groups = member.groups.filter((group) => group !== name);
    for (const kb of state.kbs.values()) kb.readers = kb.readers.filter((reader) => reader !== `group:${name}`);
    audit('group.remove', name);
    response.writeHead(204).end();
    return true;
  }
  return sendError(response, 404, 'not_found', 'no such endpoint');
}

function endSessions(mock, target) {
  for (const [token, session] of mock.sessions) if (session.userId === target.id) mock.sessions.delete(token);
}

/** Plays a sync: scanned, one `progress` per file, committed, then the report (or failed when cancelled). */
function startSync(state, user, name, audit, request, response, { sendError }) {
  if (user.role === 'viewer') return sendError(response, 403, 'forbidden', 'the viewer role may not do this');
  const kb = state.kbs.get(name);
  if (!kb || !mayRead(user, kb.readers)) return sendError(response, 404, 'not_found', `knowledge base \`${name}\` not found`);
  if (state.syncs.has(name)) return sendError(response, 409, 'conflict', `knowledge base \`${name}\` is already syncing`);
  audit('kb.sync', name);
  const sync = { name, cancelled: false, timer: null };
  state.syncs.set(name, sync);
  response.on('error', () => {});
  response.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-store', Connection: 'keep-alive' });
  const send = (type, data) => response.write(`event: ${type}\ndata: ${JSON.stringify(data)}\n\n`);
  const files = Array.from({ length: SYNC_FILES }, (_, index) => `guides/part-${index + 1}.md`);
  let step = 0;
  let chunks = 0;
  const timer = setInterval(() => {
    if (sync.cancelled) {
      finish();
      send('failed', { error: 'the operation was cancelled' });
      response.end();
      return;
    }
    // A test may hold the sync after some files, so that it is still running when cancelled.
    if (state.syncHoldAt != null && step > state.syncHoldAt) return;
    if (step === 0) send('progress', { stage: 'scanned', files: SYNC_FILES + 2, skipped: 1, unchanged: 1, to_index: SYNC_FILES, to_delete: 0 });
    else if (step <= SYNC_FILES) {
      chunks += 3;
      send('progress', { stage: 'indexed', files_done: step, files_total: SYNC_FILES, chunks, path: files[step - 1] });
    } else {
      send('progress', { stage: 'committed', generation: 7, files_done: SYNC_FILES, files_total: SYNC_FILES, chunks });
      finish();
      kb.synced_at = unixNow();
      const id = () => state.nextChunk++;
      addChunks(state, name, 'guides/part-1.md', 'Guide', [[id(), ['Guide'], [1, 9], `Synced guide for ${name}.`]]);
      send('completed', {
        kb: name, added: SYNC_FILES - 2, updated: 1, unchanged: 1, deleted: 1, chunks_indexed: chunks,
        skipped: [{ path: 'images/diagram.png', reason: 'unsupported file type (.png)' }],
        failed: [{ path: `broken/${HOSTILE}.pdf`, error: 'the PDF is encrypted' }],
        seconds: (SYNC_FILES + 2) * state.syncStepMs / 1000, chunks_per_second: 20,
      });
      response.end();
    }
    step += 1;
  }, state.syncStepMs);
  sync.timer = timer;
  const finish = () => {
    clearInterval(timer);
    state.syncs.delete(name);
  };
  // A closed connection does not stop the sync, as on the real server.
  return true;
}

function search(state, user, url, response, { sendJson, sendError }) {
  const q = (url.searchParams.get('q') ?? '').trim();
  if (!q) return sendError(response, 400, 'invalid_value', 'q must not be empty');
  const mode = url.searchParams.get('mode') ?? 'hybrid';
  if (!['hybrid', 'bm25', 'vector'].includes(mode)) return sendError(response, 400, 'invalid_value', `unknown mode \`${mode}\``);
  const wanted = (url.searchParams.get('kb') ?? '').split(',').map((name) => name.trim()).filter(Boolean);
  const words = q.toLowerCase().split(/\s+/);
  const readable = [...state.chunks.values()].filter((chunk) => {
    const kb = state.kbs.get(chunk.kb);
    return kb && mayRead(user, kb.readers) && (wanted.length === 0 || wanted.includes(chunk.kb));
  });
  const scored = readable.map((chunk) => ({ chunk, score: words.filter((word) => `${chunk.text} ${chunk.title}`.toLowerCase().includes(word)).length }))
    .filter((entry) => entry.score > 0)
    .sort((a, b) => b.score - a.score || a.chunk.chunk_id - b.chunk.chunk_id)
    .slice(0, Number(url.searchParams.get('limit') ?? 10));
  const hits = scored.map(({ chunk, score }, index) => ({
    chunk_id: chunk.chunk_id,
    score: 1 / (60 + index + 1) + (mode === 'hybrid' ? 1 / (60 + index + 2) : 0),
    text: chunk.text,
    citation: { kb: chunk.kb, path: chunk.path, title: chunk.title, heading_path: chunk.heading_path, location: chunk.location },
    bm25: mode === 'vector' ? null : { rank: index + 1, score: 2.5 * score },
    // The vector retriever misses the second hit: its rank shows as "not found".
    vector: mode === 'bm25' || index === 1 ? null : { rank: index + 1, score: 0.8 - index * 0.05 },
  }));
  return sendJson(response, 200, { hits });
}

function readAudit(state, url, response, { sendJson, sendError }) {
  const number = (key) => {
    const value = url.searchParams.get(key);
    if (value === null || value === '') return null;
    return /^-?\d+$/.test(value) ? Number(value) : NaN;
  };
  const limit = number('limit') ?? 100;
  const [before, since, until] = [number('before'), number('since'), number('until')];
  if ([limit, before, since, until].some(Number.isNaN)) return sendError(response, 400, 'invalid_value', 'limit, before, since and until are integers');
  if (limit < 1 || limit > MAX_AUDIT_PAGE) return sendError(response, 400, 'invalid_value', `limit must be between 1 and ${MAX_AUDIT_PAGE}`);
  if (since !== null && until !== null && since > until) return sendError(response, 400, 'invalid_value', 'since must not be after until');
  const actor = url.searchParams.get('actor')?.trim() || null;
  const action = url.searchParams.get('action')?.trim() || null;
  const rows = state.audit.filter((row) => (before === null || row.id < before)
    && (actor === null || row.actor === actor)
    && (action === null || row.action === action || row.action.startsWith(`${action}.`))
    && (since === null || row.at >= since)
    && (until === null || row.at <= until)).reverse();
  const entries = rows.slice(0, limit);
  return sendJson(response, 200, { entries, next_before: rows.length > limit ? entries[entries.length - 1].id : null });
}

function publicKb(kb, admin) {
  const { name, documents, chunks, created_at, synced_at, readers, root } = kb;
  return admin ? { name, documents, chunks, created_at, synced_at, readers, root } : { name, documents, chunks, created_at, synced_at, readers };
}

function publicUser(user) {
  const { id, name, role, disabled, groups, created_at } = user;
  return { id, name, role, disabled, groups, created_at };
}

function publicToken(token) {
  const { id, label, created_at, revoked_at } = token;
  return { id, label, created_at, revoked_at };
}

function unixNow() {
  return Math.floor(Date.now() / 1000);
}
