// Pieces shared by the administration screens (Knowledge, Users, Tokens, Audit): the page
// frame, labelled fields, API errors shown from their message, a two-step confirmation for
// destructive buttons, reader chips and the parser of a comma-separated reader list. Like
// everything in the UI, values from the server reach the DOM only as text.

import * as api from './api.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, hasTranslation } from './i18n.js';

/** Readers as the server writes them: role:R, group:G or user:U. */
const READER_PATTERN = /^(role:(admin|operator|viewer)|group:[\p{L}\p{N}._-]{1,64}|user:[A-Za-z0-9_.-]{1,64})$/u;

/** A value as display text: strings, numbers and booleans; anything else is empty. */
export function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}

/**
 * A screen: a <main> holding a header (title, intro) and a body. Returns {element, body,
 * header}. `hidden` until app.js shows it.
 */
export function screen({ testid, titleKey, introKey = null }) {
  const header = h('header', { className: 'admin-header' },
    bindText(h('h1', { className: 'admin-title' }), titleKey),
    introKey ? bindText(h('p', { className: 'admin-intro' }), introKey) : null);
  const body = h('div', { className: 'admin-body' });
  const page = h('div', { className: 'admin-page' }, header, body);
  const element = h('main', { className: 'admin-view', testid, hidden: true }, page);
  return { element, body, header };
}

/** A titled section of a screen. */
export function section(titleKey, { testid, className = '' } = {}, ...children) {
  const id = uniqueId('section');
  return h('section', { className: `admin-section ${className}`.trim(), testid, attrs: { 'aria-labelledby': id } },
    bindText(h('h2', { className: 'admin-section-title', id }), titleKey),
    ...children);
}

/** A labelled field: the label points at the control; an optional hint describes it. */
export function field(labelKey, control, { labelParams, hintKey = null, hintParams, className = '' } = {}) {
  if (!control.id) control.id = uniqueId('field');
  const hint = hintKey ? bindText(h('small', { className: 'admin-hint', id: uniqueId('hint') }), hintKey, hintParams) : null;
  if (hint) control.setAttribute('aria-describedby', hint.id);
  return h('div', { className: `field admin-field ${className}`.trim() },
    bindText(h('label', { className: 'field-label', htmlFor: control.id }), labelKey, labelParams),
    control, hint);
}

/** A text input with the app's field style. */
export function textInput({ testid, type = 'text', required = false, autocomplete = 'off', maxLength = null, className = '' } = {}) {
  const input = h('input', { type, className: `field-input ${className}`.trim(), testid, required, attrs: { autocomplete, spellcheck: 'false' } });
  if (maxLength !== null) input.maxLength = maxLength;
  return input;
}

/** A <select> of [value, label key] options. */
export function select(options, { testid, value = null } = {}) {
  const element = h('select', { className: 'field-input admin-select', testid },
    options.map(([optionValue, key]) => bindText(h('option', { value: optionValue }), key)));
  if (value !== null) element.value = value;
  return element;
}

/** The error line of a form: hidden until `showError` fills it. */
export function errorLine(testid) {
  return h('p', { className: 'form-error', testid, hidden: true, attrs: { role: 'alert' } });
}

/** A status line that screen readers announce politely. */
export function statusLine(testid) {
  return h('p', { className: 'admin-note', testid, attrs: { role: 'status' } });
}

/** Shows an API failure in `element`: the server's own message, or that it could not be reached. */
export function showError(element, error, fallbackKey = 'admin.error.generic') {
  element.hidden = false;
  if (error instanceof api.ApiError && error.status === 0) bindText(element, 'error.network');
  else if (error instanceof api.ApiError && error.message) bindText(element, 'admin.error.api', { message: error.message });
  else bindText(element, fallbackKey, { message: String(error?.message ?? error) });
}

export function hideError(element) {
  element.hidden = true;
  clearText(element);
}

/** Empties an element that may hold a bound translation, so a language switch leaves it empty. */
export function clearText(element) {
  delete element.dataset.i18n;
  delete element.dataset.i18nArgs;
  element.textContent = '';
}

/** A button with a translated label. */
export function button(key, { testid, className = 'button button-small', type = 'button', onClick = null, params } = {}) {
  const element = bindText(h('button', { type, className, testid }), key, params);
  if (onClick) element.addEventListener('click', onClick);
  return element;
}

/**
 * A destructive button that asks first: pressing it shows the question with a confirm and a
 * cancel button in its place (focus moves to cancel); only confirming calls `onConfirm`.
 * Returns the wrapper element.
 */
export function confirmingButton({ key, questionKey, questionParams, confirmKey, testid, onConfirm }) {
  const wrapper = h('span', { className: 'admin-confirm', testid: `${testid}-wrapper` });
  const start = button(key, { testid, className: 'button button-small button-danger' });
  const question = bindText(h('span', { className: 'admin-confirm-question', testid: `${testid}-question` }), questionKey, questionParams);
  const yes = button(confirmKey, { testid: `${testid}-confirm`, className: 'button button-small button-danger' });
  const no = button('admin.cancel', { testid: `${testid}-cancel`, className: 'button button-small button-quiet' });
  const asking = h('span', { className: 'admin-confirm-ask', hidden: true, attrs: { role: 'group' } }, question, yes, no);
  const reset = () => {
    asking.hidden = true;
    start.hidden = false;
    yes.disabled = false;
  };
  start.addEventListener('click', () => {
    start.hidden = true;
    asking.hidden = false;
    no.focus();
  });
  no.addEventListener('click', () => {
    reset();
    start.focus();
  });
  yes.addEventListener('click', async () => {
    yes.disabled = true;
    try {
      await onConfirm();
    } finally {
      if (wrapper.isConnected) reset();
    }
  });
  wrapper.append(start, asking);
  return wrapper;
}

/** A reader (`role:viewer`, `group:ops`, `user:alice`) as a chip: its kind translated, its name as text. */
export function readerChip(reader) {
  const value = text(reader);
  const colon = value.indexOf(':');
  const kind = colon === -1 ? '' : value.slice(0, colon);
  const name = colon === -1 ? value : value.slice(colon + 1);
  const chip = h('span', { className: 'chip admin-reader', testid: 'reader-chip', data: { reader: value, kind } });
  if (['role', 'group', 'user'].includes(kind)) {
    const shown = kind === 'role' && hasTranslation(`role.${name}`) ? null : name;
    chip.append(bindText(h('span', { className: 'admin-reader-kind' }), `reader.${kind}`), ' ');
    chip.append(shown === null ? bindText(h('span'), `role.${name}`) : h('span', { text: shown }));
  } else {
    chip.textContent = value;
  }
  return chip;
}

/** The chips of a reader list, or "admins only" when it is empty. */
export function readerChips(readers) {
  const list = Array.isArray(readers) ? readers.map(text).filter(Boolean) : [];
  if (list.length === 0) return h('span', { className: 'admin-readers', testid: 'readers' }, bindText(h('span', { className: 'admin-muted' }), 'reader.admins_only'));
  return h('span', { className: 'admin-readers', testid: 'readers' }, list.map(readerChip));
}

/** Parses "role:viewer, group:ops": {readers, invalid}; blanks are skipped, duplicates dropped. */
export function parseReaderList(value) {
  const readers = [];
  const invalid = [];
  for (const part of String(value).split(',').map((item) => item.trim()).filter(Boolean)) {
    if (!READER_PATTERN.test(part)) invalid.push(part);
    else if (!readers.includes(part)) readers.push(part);
  }
  return { readers, invalid };
}

/** A small "— none —" placeholder cell content. */
export function dash() {
  return h('span', { className: 'admin-muted', text: '—' });
}

/**
 * A table with translated column headers; `rows` are <tr> elements. Each cell of a full row
 * also carries its column's name (`data-label`), shown above it when narrow screens stack
 * the cells.
 */
export function table(columnKeys, rows, { testid, caption = null } = {}) {
  for (const row of rows) {
    if (row.children.length !== columnKeys.length) continue;
    [...row.children].forEach((cell, index) => {
      if (columnKeys[index]) bindAttr(cell, 'data-label', columnKeys[index]);
    });
  }
  const head = h('tr', {}, columnKeys.map((key) => (key ? bindText(h('th', { attrs: { scope: 'col' } }), key) : h('th', { attrs: { scope: 'col' } }))));
  return h('div', { className: 'admin-table-scroll' },
    h('table', { className: 'admin-table', testid },
      caption ? bindText(h('caption', { className: 'visually-hidden' }), caption) : null,
      h('thead', {}, head), h('tbody', {}, rows)));
}
