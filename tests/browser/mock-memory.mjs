// The conversation memory of the in-memory mock server (see mock-server.mjs): read a
// conversation's memory with its compaction job (`GET /api/conversations/{id}/memory`), remove
// an item (`DELETE …/memory/{item}` → 204), and confirm an item the user stated
// (`POST …/memory/{item}/confirm` → the item, now `user_confirmed`; 409 for any other trust).
// Owner only: another user's conversation answers 404 as a missing one does, and the errors
// carry the real server's codes and messages. A conversation's memory is made on its first
// read: empty, unless its first message contains [[memory]], which seeds an item of every kind
// and trust (two the user stated, one with hostile HTML, one whose source message is not in
// the conversation) and a running compaction job. Tests change `state.memory` directly to
// show the degraded and failed states; `state.memoryRequests` records every call.

export const HOSTILE_MEMORY = 'Reply as <img src=x onerror="window.__xss=1"> tables';
/** The source of an item whose message is not on the page (an older, unloaded one). */
export const ELSEWHERE_MESSAGE_ID = 'msg_elsewhere';

const MEMORY_PATH = /^\/api\/conversations\/(\d+)\/memory(?:\/([A-Za-z0-9_-]+)(\/confirm)?)?$/;

/** The memory part of the mock's state: memories by conversation id, and the calls made. */
export function memoryState() {
  return { memory: new Map(), memoryRequests: [] };
}

/**
 * Answers the memory routes; false for any other path. `helpers` holds the mock's
 * {readJson, sendJson, sendError, ownedConversation}.
 */
export async function handleMemory(state, user, method, path, request, response, helpers) {
  const match = MEMORY_PATH.exec(path);
  if (!match) return false;
  const { readJson, sendJson, sendError, ownedConversation } = helpers;
  const [, conversationId, itemId = null, confirm = null] = match;
  const action = itemId === null ? 'read' : confirm ? 'confirm' : 'delete';
  const wanted = { read: 'GET', delete: 'DELETE', confirm: 'POST' }[action];
  if (method !== wanted) return sendError(response, 405, 'method_not_allowed', `use ${wanted}`);
  if (method !== 'GET') await readJson(request);
  const answer = (status, body) => {
    state.memoryRequests.push({ method, conversationId: Number(conversationId), itemId, action, status });
    if (status === 204) response.writeHead(204).end();
    else sendJson(response, status, body);
  };
  const conversation = ownedConversation(state, user, conversationId);
  if (!conversation) return answer(404, notFound(`conversation \`${conversationId}\``));
  const memory = memoryOf(state, conversation);
  if (action === 'read') return answer(200, memory);
  const index = memory.items.findIndex((item) => item.id === itemId);
  if (index === -1) return answer(404, notFound(`memory item \`${itemId}\``));
  if (action === 'delete') {
    memory.items.splice(index, 1);
    memory.version += 1;
    return answer(204, null);
  }
  const item = memory.items[index];
  if (item.trust !== 'user_stated') {
    return answer(409, { error: { code: 'conflict', message: `only an item the user stated can be confirmed; this one is ${item.trust}` } });
  }
  item.trust = 'user_confirmed';
  item.updated_at = unixNow();
  memory.version += 1;
  return answer(200, { item });
}

/** The conversation's memory, made on first use. */
export function memoryOf(state, conversation) {
  let memory = state.memory.get(conversation.id);
  if (!memory) {
    memory = seedMemory(conversation);
    state.memory.set(conversation.id, memory);
  }
  return memory;
}

function seedMemory(conversation) {
  const memory = { version: 0, through_message_id: null, status: 'ok', degraded_reason: null, items: [], compaction: null };
  const messages = [...conversation.messages].sort((a, b) => a.turn - b.turn || (a.role === 'user' ? -1 : 1));
  const user = messages.find((message) => message.role === 'user');
  if (!user || !user.content.includes('[[memory]]')) return memory;
  const assistant = messages.find((message) => message.role === 'assistant') ?? user;
  const now = unixNow();
  const seeds = [
    ['user_goals', 'user_stated', 'Keep checkout p99 latency under 300 ms.', user, null],
    ['preferences', 'user_stated', 'Answer in short bullet points.', user, null],
    ['preferences', 'user_stated', HOSTILE_MEMORY, user, null],
    ['confirmed_facts', 'tool_verified', 'checkout-db runs PostgreSQL 16 with a 200-connection pool.', assistant, 'cit_1'],
    ['decisions', 'user_confirmed', 'Roll back the 14:05 deploy before tuning the pool.', user, null],
    ['open_tasks', 'assistant_proposed', 'Check the pooler\'s max_client_conn after the rollback.', assistant, null],
    ['resource_refs', 'tool_verified', 'Runbook: ops-runbooks/db/connection-pool.md', { id: ELSEWHERE_MESSAGE_ID }, 'cit_2'],
  ];
  memory.items = seeds.map(([kind, trust, text, source, citation], index) => ({
    id: `mem_${conversation.id}_${index + 1}`,
    kind,
    text,
    source_message_id: String(source.id),
    citation_id: citation,
    trust,
    created_at: now - 600 + index,
    updated_at: now - 600 + index,
  }));
  memory.version = 1;
  memory.through_message_id = String(assistant.id);
  memory.compaction = {
    id: `cmp_${conversation.id}`, conversation_id: String(conversation.id), status: 'running', attempts: 1, last_error: null, updated_at: now,
  };
  return memory;
}

function notFound(what) {
  return { error: { code: 'not_found', message: `${what} not found` } };
}

function unixNow() {
  return Math.floor(Date.now() / 1000);
}
