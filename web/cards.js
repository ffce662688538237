// Structured results of the chat agent: fact cards (an incident, a list of incidents, a
// diagnostic report, "not found") and confirmation cards for actions that wait for a person.
// Every value comes from a run event, so it reaches the DOM only as text nodes and
// attributes set through DOM APIs; class names built from values are reduced to safe tokens.

import * as api from './api.js';
import { h, uniqueId } from './dom.js';
import { bindText, bindTime, hasTranslation } from './i18n.js';

/** Incident fields shown first, in this order; the rest follow as they come. */
const INCIDENT_FIELDS = ['id', 'service', 'severity', 'status', 'starts_at', 'ends_at'];
const INCIDENT_COLUMNS = ['id', 'title', 'service', 'severity', 'status', 'starts_at'];
const TASK_FIELDS = ['id', 'incident_id', 'status'];
/** The diagnostic report's safety fields: always listed, missing ones marked missing. */
export const SAFETY_FIELDS = ['recoveryMode', 'executionPermitted', 'humanApprovalRequired', 'validatorStatus', 'evidenceIds'];
const REPORT_FIELDS = ['component', 'mechanism'];
/** Nested objects deeper than this show as JSON text. */
const MAX_NESTING = 2;
/** Action statuses after which nothing can be decided any more. */
const FINAL_STATUSES = new Set(['awaiting_approval', 'confirmed', 'rejected', 'expired', 'executed', 'failed']);

/** A fact card for a `card` event's {kind, data}. */
export function renderCard(kind, data) {
  const facts = isObject(data) ? data : {};
  switch (kind) {
    case 'incident':
      return incidentCard(facts);
    case 'incident_list':
      return incidentListCard(facts);
    case 'diagnostic_report':
      return diagnosticCard(facts);
    case 'not_found':
      return notFoundCard(facts);
    default:
      return cardShell(kind, { kindKey: null, kindText: String(kind ?? '') }, factList(Object.entries(facts)));
  }
}

function cardShell(kind, { kindKey, kindText = '', title = null, badges = [] }, ...body) {
  const label = h('span', { className: 'card-kind' });
  if (kindKey) bindText(label, kindKey);
  else label.textContent = kindText;
  const header = h('header', { className: 'card-header' },
    label,
    title === null ? null : h('h3', { className: 'card-title', testid: 'card-title', text: title }),
    badges.length > 0 ? h('span', { className: 'card-badges' }, badges) : null);
  return h('section', { className: `card card-${token(kind)}`, testid: 'card', data: { kind: token(kind) } }, header, ...body);
}

function incidentCard(incident) {
  const entries = orderedEntries(incident, INCIDENT_FIELDS, ['title']);
  return cardShell('incident', {
    kindKey: 'card.incident',
    title: text(incident.title) || text(incident.id),
    badges: [badge('severity', incident.severity), badge('status', incident.status)],
  }, factList(entries));
}

function incidentListCard(data) {
  const incidents = Array.isArray(data.incidents) ? data.incidents.filter(isObject) : [];
  const count = h('span', { className: 'card-count' });
  bindText(count, 'card.incident_count', { count: incidents.length });
  if (incidents.length === 0) {
    return cardShell('incident_list', { kindKey: 'card.incident_list', badges: [count] },
      bindText(h('p', { className: 'card-note' }), 'card.no_incidents'));
  }
  const head = h('tr', {}, INCIDENT_COLUMNS.map((key) => fieldLabel(h('th', { attrs: { scope: 'col' } }), key)));
  const rows = incidents.map((incident) => h('tr', { testid: 'incident-row' }, INCIDENT_COLUMNS.map((key) => {
    if (key === 'severity' || key === 'status') return h('td', {}, badge(key, incident[key]));
    return h('td', {}, valueNode(key, incident[key], 0));
  })));
  const table = h('table', { className: 'card-table' }, h('thead', {}, head), h('tbody', {}, rows));
  return cardShell('incident_list', { kindKey: 'card.incident_list', badges: [count] }, h('div', { className: 'table-scroll' }, table));
}

function diagnosticCard(task) {
  const report = task.report;
  const parts = [factList(orderedEntries(task, TASK_FIELDS, ['report', 'owner_id']))];
  if (!isObject(report)) {
    parts.push(bindText(h('p', { className: 'card-note', testid: 'report-missing' }), 'card.no_report'));
  } else {
    parts.push(factList(orderedEntries(report, REPORT_FIELDS, SAFETY_FIELDS)));
    const safety = h('dl', { className: 'facts safety-facts' }, SAFETY_FIELDS.map((key) => {
      const missing = report[key] === undefined || report[key] === null;
      const value = missing ? bindText(h('span', { className: 'flag flag-missing' }), 'card.missing') : safetyValue(key, report[key]);
      return h('div', { className: 'fact', data: { field: key, missing: missing ? 'true' : undefined } },
        fieldLabel(h('dt'), key), h('dd', {}, value));
    }));
    parts.push(h('div', { className: 'safety', testid: 'safety' },
      bindText(h('h4', { className: 'safety-title' }), 'card.safety'), safety));
  }
  return cardShell('diagnostic_report', {
    kindKey: 'card.diagnostic_report',
    title: text(task.id),
    badges: [badge('status', task.status)],
  }, ...parts);
}

function safetyValue(key, value) {
  if (typeof value === 'boolean') {
    // Execution being permitted is what a reader must not miss; an approval is a safeguard.
    const tone = key === 'executionPermitted' ? (value ? 'alert' : 'safe') : (value ? 'safe' : 'alert');
    return bindText(h('span', { className: `flag flag-${tone}`, data: { value: String(value) } }), value ? 'common.yes' : 'common.no');
  }
  if (key === 'validatorStatus' && typeof value === 'string') {
    const tone = /^(pass|passed|ok|valid|approved)$/i.test(value) ? 'safe' : 'alert';
    return h('span', { className: `flag flag-${tone}`, text: value });
  }
  return valueNode(key, value, 0);
}

function notFoundCard(data) {
  const resource = text(data.resource);
  const key = `card.not_found.${token(resource.replace(/\s+/g, '_'))}`;
  const message = h('p', { className: 'card-note', testid: 'not-found' });
  if (hasTranslation(key)) bindText(message, key, { id: text(data.id) });
  else bindText(message, 'card.not_found', { resource, id: text(data.id) });
  return cardShell('not_found', { kindKey: 'card.not_found_title' }, message);
}

// --- Confirmations -------------------------------------------------------------------------------

/**
 * A card for a `confirmation.required` event: kind, target, reason, the exact parameters and
 * Confirm / Reject. Returns {element, refresh()}; refresh() reads the action's current status
 * (a reloaded page shows a decided action as decided).
 */
export function createConfirmation(data) {
  const actionId = text(data.action_id);
  const hash = text(data.parameters_hash);
  const state = { status: 'pending', busy: false, decidedHere: false };
  const statusBadge = h('span', { className: 'badge action-status', testid: 'confirmation-status' });
  const result = h('p', { className: 'confirm-result', testid: 'confirmation-result', attrs: { role: 'status', 'aria-live': 'polite' } });
  const error = h('p', { className: 'confirm-error', testid: 'confirmation-error', hidden: true, attrs: { role: 'alert' } });
  const confirm = bindText(h('button', { type: 'button', className: 'button button-primary', testid: 'confirm' }), 'action.confirm');
  const reject = bindText(h('button', { type: 'button', className: 'button', testid: 'reject' }), 'action.reject');
  const params = h('pre', { className: 'confirm-params', testid: 'confirmation-params', text: prettyJson(data.parameters) });
  const expires = typeof data.expires_at === 'number' ? bindTime(h('time'), data.expires_at) : h('span', { text: '—' });
  const facts = h('dl', { className: 'facts' },
    fact('target', h('span', { className: 'confirm-target', text: text(data.target) })),
    fact('reason', h('span', { text: text(data.reason) })),
    fact('expires_at', expires));
  const kindKey = `action.kind.${token(data.kind)}`;
  const title = h('h3', { className: 'card-title', id: uniqueId('action') });
  if (hasTranslation(kindKey)) bindText(title, kindKey);
  else title.textContent = text(data.kind);
  const element = h('section', {
    className: 'card card-confirm',
    testid: 'confirmation',
    data: { actionId, kind: token(data.kind), status: 'pending' },
    attrs: { 'aria-labelledby': title.id },
  },
  h('header', { className: 'card-header' },
    bindText(h('span', { className: 'card-kind' }), 'action.needs_confirmation'),
    title,
    h('span', { className: 'card-badges' }, statusBadge)),
  facts,
  h('div', { className: 'confirm-params-box' }, bindText(h('p', { className: 'confirm-params-label' }), 'field.parameters'), params),
  h('div', { className: 'confirm-buttons' }, confirm, reject),
  result,
  error);

  const show = (status, actionResult = null) => {
    state.status = FINAL_STATUSES.has(status) || status === 'pending' ? status : 'other';
    element.dataset.status = state.status;
    bindText(statusBadge, hasTranslation(`action.status.${token(status)}`) ? `action.status.${token(status)}` : 'action.status.other', { status: text(status) });
    statusBadge.dataset.status = state.status;
    const outcome = outcomeText(status, isObject(actionResult) ? actionResult : {});
    if (outcome) bindText(result, outcome[0], outcome[1]);
    else result.replaceChildren();
    result.hidden = outcome === null;
    const open = state.status === 'pending';
    confirm.hidden = !open;
    reject.hidden = !open;
    confirm.disabled = !open || state.busy;
    reject.disabled = !open || state.busy;
  };

  const showError = (err) => {
    error.hidden = false;
    if (!(err instanceof api.ApiError)) bindText(error, 'error.generic', { message: String(err) });
    else if (err.status === 0) bindText(error, 'error.network');
    else if (err.status === 403) bindText(error, 'action.error.forbidden');
    else if (err.status === 409) bindText(error, 'action.error.conflict', { message: err.message });
    else if (err.status === 422) bindText(error, 'action.error.changed');
    else if (err.status === 404) bindText(error, 'action.error.not_found');
    else bindText(error, 'error.generic', { message: err.message });
  };

  const decide = async (decision) => {
    if (state.busy || state.status !== 'pending') return;
    state.busy = true;
    state.decidedHere = true;
    error.hidden = true;
    element.dataset.busy = 'true';
    confirm.disabled = true;
    reject.disabled = true;
    result.hidden = false;
    bindText(result, decision === 'confirm' ? 'action.confirming' : 'action.rejecting');
    try {
      const action = await api.decideAction(actionId, decision, hash);
      state.busy = false;
      show(action?.status ?? 'other', action?.result);
    } catch (err) {
      state.busy = false;
      show(state.status);
      showError(err);
      // Decided elsewhere, expired, or in flight: show where the action stands now.
      if (err instanceof api.ApiError && err.status === 409) refresh({ force: true });
    } finally {
      delete element.dataset.busy;
    }
  };

  const refresh = async ({ force = false } = {}) => {
    if (!actionId) return;
    let action;
    try {
      action = await api.getAction(actionId);
    } catch {
      return; // The card still shows what the event said.
    }
    // A decision made on this page since is newer than what this read saw.
    if (state.busy || (state.decidedHere && !force) || !action?.status) return;
    show(action.status, action.result);
  };

  confirm.addEventListener('click', () => decide('confirm'));
  reject.addEventListener('click', () => decide('reject'));
  const expired = typeof data.expires_at === 'number' && data.expires_at * 1000 <= Date.now();
  show(expired ? 'expired' : 'pending');
  return { element, refresh };
}

/** The i18n key and parameters that describe a decided action, or null for a pending one. */
function outcomeText(status, result) {
  switch (status) {
    case 'executed':
      if (result.diagnostic_task_id !== undefined) {
        return ['action.result.diagnostic', { id: text(result.diagnostic_task_id), status: text(result.status) }];
      }
      return ['action.result.executed', {}];
    case 'confirmed':
      if (result.approval_id !== undefined) return ['action.result.approval', { id: text(result.approval_id) }];
      return ['action.result.confirmed', {}];
    case 'awaiting_approval':
      return ['action.result.awaiting_approval', {}];
    case 'rejected':
      return ['action.result.rejected', {}];
    case 'expired':
      return ['action.result.expired', {}];
    case 'failed':
      return ['action.result.failed', { error: text(result.error) }];
    case 'pending':
      return null;
    default:
      return ['action.status.other', { status: text(status) }];
  }
}

// --- Facts -------------------------------------------------------------------------------------

/** `first` keys in order (when present), then the others except `skip`. */
function orderedEntries(object, first, skip = []) {
  const entries = first.filter((key) => key in object).map((key) => [key, object[key]]);
  for (const [key, value] of Object.entries(object)) {
    if (!first.includes(key) && !skip.includes(key)) entries.push([key, value]);
  }
  return entries;
}

function factList(entries, depth = 0) {
  return h('dl', { className: 'facts' }, entries.map(([key, value]) => fact(key, valueNode(key, value, depth))));
}

function fact(key, valueElement) {
  return h('div', { className: 'fact', data: { field: token(key) } }, fieldLabel(h('dt'), key), h('dd', {}, valueElement));
}

/** Labels a field with its translation, or its own name when there is none. */
function fieldLabel(element, key) {
  const name = `field.${key}`;
  if (hasTranslation(name)) bindText(element, name);
  else element.textContent = key;
  return element;
}

function valueNode(key, value, depth) {
  if (value === null || value === undefined || value === '') return h('span', { className: 'fact-empty', text: '—' });
  if (typeof value === 'boolean') return bindText(h('span', { className: 'flag', data: { value: String(value) } }), value ? 'common.yes' : 'common.no');
  if (typeof value === 'number' && /_at$/.test(key) && Number.isFinite(value)) {
    return bindTime(h('time'), value > 1e12 ? Math.floor(value / 1000) : value);
  }
  if (typeof value === 'string' || typeof value === 'number') return h('span', { className: /(^|_)id$|Ids?$/.test(key) ? 'fact-id' : null, text: String(value) });
  if (Array.isArray(value)) {
    if (value.length === 0) return h('span', { className: 'fact-empty', text: '—' });
    if (value.every((item) => ['string', 'number', 'boolean'].includes(typeof item))) {
      return h('ul', { className: 'chip-list' }, value.map((item) => h('li', {}, h('code', { text: String(item) }))));
    }
    return h('pre', { className: 'fact-json', text: prettyJson(value) });
  }
  if (isObject(value) && depth < MAX_NESTING) {
    const entries = Object.entries(value);
    if (entries.length === 0) return h('span', { className: 'fact-empty', text: '—' });
    const list = factList(entries, depth + 1);
    list.classList.add('facts-nested');
    return list;
  }
  return h('pre', { className: 'fact-json', text: prettyJson(value) });
}

function badge(kind, value) {
  if (typeof value !== 'string' && typeof value !== 'number') return null;
  return h('span', { className: `badge badge-${kind}`, data: { value: token(String(value).toLowerCase()) }, text: String(value) });
}

function prettyJson(value) {
  try {
    return JSON.stringify(value ?? null, null, 2) ?? 'null';
  } catch {
    return String(value);
  }
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A string, number or boolean as text; anything else as nothing. */
function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}

/** A value reduced to something safe inside a class name or data attribute. */
export function token(value) {
  return typeof value === 'string' && /^[A-Za-z0-9_-]{1,40}$/.test(value) ? value : 'other';
}
