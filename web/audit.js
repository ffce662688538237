// The Audit screen (`#/audit`, admins only): the audit log newest first, a page at a time,
// filtered by actor, action (an action or a prefix such as `user`) and a time window
// (local date and time; both ends included). Older pages follow the server's `next_before`
// cursor; Newer goes back along the cursors already visited.

import * as api from './api.js';
import { button, clearText, dash, errorLine, field, hideError, screen, section, showError, statusLine, table, text, textInput } from './admin-common.js';
import { h } from './dom.js';
import { bindAttr, bindText, bindTime } from './i18n.js';

const PAGE_SIZE = 50;
/** Actions offered as suggestions in the action filter. */
const KNOWN_ACTIONS = ['auth', 'auth.login', 'auth.logout', 'user', 'user.create', 'user.role', 'user.disable', 'user.enable', 'user.groups',
  'user.password_reset', 'group', 'group.create', 'group.remove', 'token', 'token.create', 'token.revoke', 'kb', 'kb.add', 'kb.sync',
  'kb.remove', 'kb.readers', 'run.start', 'diagnostic.start', 'action.confirm', 'action.reject', 'alert.receive'];

/** Creates the screen for the signed-in `user`. Returns {element, show(), hide(), dispose()}. */
export function createAuditView({ user }) {
  return new AuditView(user);
}

class AuditView {
  constructor(user) {
    this.user = user;
    this.generation = 0;
    this.filters = {};
    /** `before` cursors of the pages shown so far; the last one is the current page's. */
    this.cursors = [null];
    this.nextBefore = null;
    const { element, body } = screen({ testid: 'audit', titleKey: 'audit.title', introKey: 'audit.intro' });
    this.element = element;
    this.body = body;
    this.status = statusLine('audit-status');
    this.error = errorLine('audit-error');
    this.tableBox = h('div');
    this.newer = button('audit.newer', { testid: 'audit-newer', onClick: () => this.page(-1) });
    this.older = button('audit.older', { testid: 'audit-older', onClick: () => this.page(1) });
    this.pageLabel = h('span', { className: 'admin-muted', testid: 'audit-page' });
    body.append(
      section('audit.filters', { testid: 'audit-filters' }, this.filterForm()),
      section('audit.entries', { testid: 'audit-list' }, this.status, this.error, this.tableBox,
        bindAttr(h('nav', { className: 'admin-row audit-pager' }, this.newer, this.pageLabel, this.older), 'aria-label', 'audit.pages')));
  }

  show() {
    this.element.hidden = false;
    if (this.user.role !== 'admin') {
      this.body.replaceChildren(bindText(h('p', { className: 'form-error', testid: 'audit-forbidden', attrs: { role: 'alert' } }), 'admin.admins_only'));
      return;
    }
    this.load();
  }

  hide() {
    this.element.hidden = true;
  }

  dispose() {
    this.generation += 1;
  }

  /** Moves one page older (1) or newer (-1). */
  page(step) {
    if (step > 0 && this.nextBefore !== null) this.cursors.push(this.nextBefore);
    else if (step < 0 && this.cursors.length > 1) this.cursors.pop();
    else return;
    this.load();
  }

  async load() {
    this.generation += 1;
    const mine = this.generation;
    this.newer.disabled = true;
    this.older.disabled = true;
    bindText(this.status, 'audit.loading');
    let page;
    try {
      page = await api.readAudit({ ...this.filters, before: this.cursors[this.cursors.length - 1], limit: PAGE_SIZE });
    } catch (error) {
      if (mine !== this.generation) return;
      clearText(this.status);
      showError(this.error, error);
      this.newer.disabled = this.cursors.length <= 1;
      return;
    }
    if (mine !== this.generation) return;
    hideError(this.error);
    this.nextBefore = typeof page.next_before === 'number' ? page.next_before : null;
    this.newer.disabled = this.cursors.length <= 1;
    this.older.disabled = this.nextBefore === null;
    bindText(this.pageLabel, 'audit.page', { n: this.cursors.length });
    bindText(this.status, page.entries.length === 0 ? 'audit.none' : 'audit.count', { count: page.entries.length });
    this.draw(page.entries);
  }

  draw(entries) {
    if (entries.length === 0) {
      this.tableBox.replaceChildren();
      return;
    }
    const rows = entries.map((entry) => {
      const outcome = text(entry.outcome);
      const detail = entry.detail === null || entry.detail === undefined ? '' : JSON.stringify(entry.detail);
      return h('tr', { testid: 'audit-row', data: { id: text(entry.id), action: text(entry.action), actor: text(entry.actor) } },
        h('td', {}, typeof entry.at === 'number' ? bindTime(h('time', { testid: 'audit-time' }), entry.at) : dash()),
        h('td', { testid: 'audit-actor', text: text(entry.actor) }),
        h('td', {}, h('code', { testid: 'audit-action', text: text(entry.action) })),
        h('td', { testid: 'audit-target', text: text(entry.target) }),
        h('td', {}, outcomeBadge(outcome)),
        h('td', { className: 'audit-detail' }, detail ? h('code', { testid: 'audit-detail', text: detail }) : dash()));
    });
    this.tableBox.replaceChildren(table(['audit.col.time', 'audit.col.actor', 'audit.col.action', 'audit.col.target', 'audit.col.outcome', 'audit.col.detail'], rows, { testid: 'audit-table' }));
  }

  filterForm() {
    const actor = textInput({ testid: 'audit-actor-filter', maxLength: 200 });
    const action = textInput({ testid: 'audit-action-filter', maxLength: 200 });
    const listId = 'audit-action-suggestions';
    action.setAttribute('list', listId);
    const suggestions = h('datalist', { id: listId }, KNOWN_ACTIONS.map((value) => h('option', { value })));
    const since = textInput({ testid: 'audit-since', type: 'datetime-local' });
    const until = textInput({ testid: 'audit-until', type: 'datetime-local' });
    const error = errorLine('audit-filter-error');
    const apply = button('audit.apply', { testid: 'audit-apply', className: 'button button-primary', type: 'submit' });
    const clear = button('audit.clear', { testid: 'audit-clear', className: 'button button-quiet' });
    const form = h('form', { className: 'admin-form', testid: 'audit-filter-form' },
      h('div', { className: 'admin-grid audit-grid' },
        field('audit.actor', actor),
        field('audit.action', action, { hintKey: 'audit.action_hint' }),
        field('audit.since', since),
        field('audit.until', until)),
      suggestions, error, h('div', { className: 'admin-row' }, apply, clear));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      hideError(error);
      const from = localSeconds(since.value, 0);
      const to = localSeconds(until.value, 59);
      if (from !== null && to !== null && from > to) {
        error.hidden = false;
        bindText(error, 'audit.bad_window');
        return;
      }
      this.filters = { actor: actor.value.trim(), action: action.value.trim(), since: from, until: to };
      this.cursors = [null];
      this.load();
    });
    clear.addEventListener('click', () => {
      for (const input of [actor, action, since, until]) input.value = '';
      hideError(error);
      this.filters = {};
      this.cursors = [null];
      this.load();
    });
    return form;
  }
}

function outcomeBadge(outcome) {
  const badge = h('span', { className: 'badge audit-outcome', testid: 'audit-outcome', data: { value: outcome } });
  if (['success', 'failure', 'denied'].includes(outcome)) bindText(badge, `audit.outcome.${outcome}`);
  else badge.textContent = outcome || '?';
  return badge;
}

/** A datetime-local value as seconds since the epoch (plus `extra` seconds), or null when empty. */
function localSeconds(value, extra) {
  if (!value) return null;
  const millis = new Date(value).getTime();
  return Number.isFinite(millis) ? Math.floor(millis / 1000) + extra : null;
}
