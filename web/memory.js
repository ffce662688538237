// The memory panel of the open conversation: what Warden keeps from it when older messages are
// summarized (goals, confirmed facts, preferences, decisions, open tasks, resources), each item
// with how far it may be trusted and a way back to the message it came from. It owns the
// panel's toggle button, loading the memory (on opening, and again when the chat pane says a
// run ended), confirming an item the user stated, removing an item, and the panel's notices
// (nothing remembered, degraded memory, the background compaction job). Finding and
// highlighting a message in the transcript is the chat pane's, through `showMessage`. Item
// text and reasons come from the model and the user: they reach the DOM as text only.

import * as api from './api.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, bindTime, hasTranslation } from './i18n.js';

/** The kinds in the order the panel groups them; unknown kinds follow under their raw name. */
const KIND_ORDER = ['user_goals', 'confirmed_facts', 'preferences', 'decisions', 'open_tasks', 'resource_refs'];
/** The compaction job's statuses that get a line (a finished job says nothing). */
const COMPACTION_NOTICES = new Set(['queued', 'running', 'failed']);
/** Widths at or below this close the panel after jumping to a message (keep in sync with style.css). */
const NARROW_LAYOUT = '(max-width: 760px)';

/**
 * Creates the memory panel. `showMessage(id)` scrolls the transcript to the message with that
 * id and highlights it, returning false when the message is not on the page. Returns
 * {toggle, element, setConversation(id | null), refresh(), dispose()}.
 */
export function createMemoryPanel({ showMessage }) {
  return new MemoryPanel(showMessage);
}

class MemoryPanel {
  constructor(showMessage) {
    this.showMessage = showMessage;
    this.conversationId = null;
    this.generation = 0;
    this.loaded = false;
    /** The drawn items by id: {item, element}. */
    this.rows = new Map();

    const panelId = uniqueId('memory');
    const titleId = uniqueId('memory-title');
    this.toggle = h('button', {
      type: 'button',
      className: 'button button-small memory-toggle',
      testid: 'memory-toggle',
      hidden: true,
      attrs: { 'aria-expanded': 'false', 'aria-controls': panelId },
      on: { click: () => this.setOpen(this.element.hidden) },
    },
    h('span', { className: 'memory-toggle-icon', attrs: { 'aria-hidden': 'true' } }),
    bindText(h('span'), 'memory.toggle'));
    const close = h('button', { type: 'button', className: 'icon-button memory-close', testid: 'memory-close', on: { click: () => this.setOpen(false) } },
      h('span', { attrs: { 'aria-hidden': 'true' }, text: '×' }));
    bindAttr(close, 'aria-label', 'memory.close');
    this.notices = h('div', { className: 'memory-notices', hidden: true });
    this.error = h('p', { className: 'form-error memory-error', testid: 'memory-error', hidden: true, attrs: { role: 'alert' } });
    this.note = h('p', { className: 'memory-note', testid: 'memory-note', attrs: { role: 'status' } });
    this.groups = h('div', { className: 'memory-groups', testid: 'memory-items' });
    this.element = h('aside', {
      className: 'memory-panel',
      id: panelId,
      testid: 'memory-panel',
      hidden: true,
      attrs: { 'aria-labelledby': titleId, tabindex: '-1' },
      on: { keydown: (event) => this.onKeydown(event) },
    },
    h('header', { className: 'memory-header' },
      bindText(h('h2', { className: 'memory-title', id: titleId }), 'memory.title'),
      close),
    bindText(h('p', { className: 'memory-intro' }), 'memory.intro'),
    this.notices, this.error, this.note, this.groups);
  }

  /** Shows the toggle for a conversation (hides it for null); an open panel loads the new one. */
  setConversation(id) {
    const next = id === null || id === undefined ? null : String(id);
    this.toggle.hidden = next === null;
    if (next === this.conversationId) return;
    this.conversationId = next;
    this.clear();
    if (next === null) this.setOpen(false, { restoreFocus: false });
    else if (!this.element.hidden) this.load();
  }

  /** Loads the memory again if the panel is open (a run of the conversation ended). */
  refresh() {
    if (!this.element.hidden) this.load();
  }

  /** Forgets the conversation (on sign-out). */
  dispose() {
    this.setConversation(null);
  }

  setOpen(open, { restoreFocus = true } = {}) {
    if (open && this.conversationId === null) return;
    const hadFocus = this.element.contains(document.activeElement);
    this.element.hidden = !open;
    this.toggle.setAttribute('aria-expanded', String(open));
    this.toggle.classList.toggle('is-open', open);
    if (open) this.load();
    else if (restoreFocus && hadFocus) this.toggle.focus();
  }

  onKeydown(event) {
    if (event.key !== 'Escape') return;
    event.preventDefault();
    this.setOpen(false);
    this.toggle.focus();
  }

  clear() {
    this.generation += 1;
    this.loaded = false;
    this.rows.clear();
    this.groups.replaceChildren();
    this.notices.replaceChildren();
    this.notices.hidden = true;
    this.error.hidden = true;
    this.note.hidden = true;
  }

  // --- Loading and drawing ------------------------------------------------------------------

  async load() {
    const id = this.conversationId;
    if (id === null) return;
    this.generation += 1;
    const mine = this.generation;
    if (!this.loaded) {
      bindText(this.note, 'memory.loading');
      this.note.hidden = false;
    }
    this.element.setAttribute('aria-busy', 'true');
    let memory;
    try {
      memory = await api.getMemory(id);
    } catch (error) {
      if (mine !== this.generation) return;
      this.element.setAttribute('aria-busy', 'false');
      if (!this.loaded) this.note.hidden = true;
      showApiError(this.error, 'memory.load_failed', error);
      return;
    }
    if (mine !== this.generation) return;
    this.element.setAttribute('aria-busy', 'false');
    this.loaded = true;
    this.error.hidden = true;
    this.render(isObject(memory) ? memory : {});
  }

  render(memory) {
    // A refresh while a person is on an item keeps them on it.
    const focused = this.groups.contains(document.activeElement) ? document.activeElement.closest('.memory-item')?.dataset.itemId : null;
    this.renderNotices(memory);
    const items = Array.isArray(memory.items) ? memory.items.filter(isObject) : [];
    this.rows.clear();
    const byKind = new Map(KIND_ORDER.map((kind) => [kind, []]));
    for (const item of items) {
      const kind = text(item.kind);
      if (!byKind.has(kind)) byKind.set(kind, []);
      byKind.get(kind).push(item);
    }
    const groups = [...byKind].filter(([, list]) => list.length > 0).map(([kind, list]) => this.groupElement(kind, list));
    this.groups.replaceChildren(...groups);
    this.showEmptyWhenEmpty();
    if (focused) (this.rows.get(focused)?.element ?? this.element).focus();
  }

  renderNotices(memory) {
    const notices = [];
    if (memory.status === 'degraded') {
      const reason = text(memory.degraded_reason);
      notices.push(bindText(h('p', { className: 'degraded-notice memory-degraded', testid: 'memory-degraded' }),
        reason ? 'memory.degraded' : 'memory.degraded_unknown', { reason }));
    }
    const job = isObject(memory.compaction) ? memory.compaction : null;
    if (job && COMPACTION_NOTICES.has(job.status)) {
      const line = h('p', { className: 'memory-compaction', testid: 'memory-compaction', data: { status: job.status } });
      const reason = text(job.last_error);
      const key = job.status === 'failed' && !reason ? 'memory.compaction.failed_unknown' : `memory.compaction.${job.status}`;
      bindText(line, key, { reason, attempts: text(job.attempts) || '1' });
      notices.push(line);
    }
    this.notices.replaceChildren(...notices);
    this.notices.hidden = notices.length === 0;
  }

  groupElement(kind, items) {
    const heading = h('h3', { className: 'memory-kind', id: uniqueId('memory-kind') });
    if (hasTranslation(`memory.kind.${kind}`)) bindText(heading, `memory.kind.${kind}`);
    else heading.textContent = kind || '?';
    const list = h('ul', { className: 'memory-list', attrs: { 'aria-labelledby': heading.id } }, items.map((item) => this.itemElement(item)));
    return h('section', { className: 'memory-group', testid: 'memory-group', data: { kind } }, heading, list);
  }

  itemElement(item) {
    const id = text(item.id);
    const trust = text(item.trust);
    const badge = h('span', { className: 'badge memory-trust', testid: 'memory-trust', data: { trust } });
    if (hasTranslation(`memory.trust.${trust}`)) bindText(badge, `memory.trust.${trust}`);
    else badge.textContent = trust || '?';
    const note = h('p', { className: 'memory-source-note', testid: 'memory-source-note', hidden: true, attrs: { role: 'status' } });
    const error = h('p', { className: 'confirm-error memory-item-error', testid: 'memory-item-error', hidden: true, attrs: { role: 'alert' } });
    const sourceId = text(item.source_message_id);
    const source = sourceId
      ? bindText(h('button', { type: 'button', className: 'memory-source', testid: 'memory-source', data: { messageId: sourceId } }), 'memory.source')
      : null;
    source?.addEventListener('click', () => this.jumpToSource(sourceId, note));
    const confirm = trust === 'user_stated'
      ? bindText(h('button', { type: 'button', className: 'button button-small', testid: 'memory-confirm' }), 'memory.confirm')
      : null;
    const remove = bindText(h('button', { type: 'button', className: 'button button-small button-quiet memory-remove', testid: 'memory-remove' }), 'memory.remove');
    const element = h('li', {
      className: 'memory-item',
      testid: 'memory-item',
      data: { itemId: id, kind: text(item.kind), trust },
      attrs: { tabindex: '-1' },
    },
    h('div', { className: 'memory-item-meta' },
      badge,
      typeof item.updated_at === 'number' ? bindTime(h('time', { className: 'memory-time' }), item.updated_at) : null,
      source),
    h('p', { className: 'memory-text', testid: 'memory-text', text: text(item.text) }),
    note,
    h('div', { className: 'memory-item-actions' }, confirm, remove),
    error);
    const row = { item, element, error, buttons: [confirm, remove].filter(Boolean) };
    confirm?.addEventListener('click', () => this.confirm(row, confirm));
    remove.addEventListener('click', () => this.remove(row, remove));
    this.rows.set(id, row);
    return element;
  }

  showEmptyWhenEmpty() {
    const empty = this.rows.size === 0;
    this.note.hidden = !empty;
    if (empty) bindText(this.note, 'memory.empty');
  }

  // --- What a person does with an item ------------------------------------------------------------

  jumpToSource(messageId, note) {
    const shown = this.showMessage(messageId);
    note.hidden = shown;
    if (!shown) bindText(note, 'memory.source_missing');
    else if (window.matchMedia(NARROW_LAYOUT).matches) this.setOpen(false, { restoreFocus: false });
  }

  async confirm(row, button) {
    const conversationId = this.conversationId;
    const id = text(row.item.id);
    this.setBusy(row, true);
    bindText(button, 'memory.confirming');
    let confirmed;
    try {
      confirmed = await api.confirmMemoryItem(conversationId, id);
    } catch (error) {
      if (conversationId !== this.conversationId || this.rows.get(id) !== row) return;
      this.setBusy(row, false);
      bindText(button, 'memory.confirm');
      showApiError(row.error, 'memory.confirm_failed', error);
      return;
    }
    if (conversationId !== this.conversationId || this.rows.get(id) !== row) return;
    const updated = isObject(confirmed) ? { ...row.item, ...confirmed } : { ...row.item, trust: 'user_confirmed' };
    const element = this.itemElement(updated);
    row.element.replaceWith(element);
    element.focus();
  }

  async remove(row, button) {
    const conversationId = this.conversationId;
    const id = text(row.item.id);
    this.setBusy(row, true);
    bindText(button, 'memory.removing');
    try {
      await api.removeMemoryItem(conversationId, id);
    } catch (error) {
      if (conversationId !== this.conversationId || this.rows.get(id) !== row) return;
      this.setBusy(row, false);
      bindText(button, 'memory.remove');
      showApiError(row.error, 'memory.remove_failed', error);
      return;
    }
    if (conversationId !== this.conversationId || this.rows.get(id) !== row) return;
    const items = [...row.element.parentElement.children];
    const next = items[items.indexOf(row.element) + 1] ?? items[items.indexOf(row.element) - 1] ?? null;
    const group = row.element.closest('.memory-group');
    row.element.remove();
    this.rows.delete(id);
    if (group && group.querySelector('.memory-item') === null) group.remove();
    this.showEmptyWhenEmpty();
    (next ?? this.element).focus();
  }

  setBusy(row, busy) {
    row.error.hidden = true;
    row.element.setAttribute('aria-busy', String(busy));
    for (const button of row.buttons) button.disabled = busy;
  }
}

/** Shows an API failure in `element`: `key` with the server's message, or why it could not be asked. */
function showApiError(element, key, error) {
  if (error instanceof api.ApiError && error.status === 401) return; // app.js shows sign-in.
  element.hidden = false;
  if (error instanceof api.ApiError && error.status === 0) bindText(element, 'error.network');
  else bindText(element, key, { message: error instanceof Error ? error.message : String(error) });
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}
