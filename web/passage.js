// The passage viewer: a modal dialog that shows one cited chunk in its document's context —
// the knowledge base, file, title, heading path and location, the chunks just before it,
// the cited chunk itself (marked), and the chunks after it. Any reader can open it from a
// citation (a search hit, a chat answer's source); the server answers 404 for a passage
// that does not exist or that the reader may not read, and the dialog says so. Escape or
// the close button closes it, and focus returns to what opened it.

import * as api from './api.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText } from './i18n.js';

let dialog = null;
let generation = 0;

/** Opens the viewer on `chunkId`; `opener` gets the focus back when it closes. */
export async function openPassage(chunkId, opener = document.activeElement) {
  const view = ensureDialog();
  generation += 1;
  const mine = generation;
  view.opener = opener instanceof HTMLElement ? opener : null;
  view.title.textContent = '';
  bindText(view.title, 'passage.title');
  view.body.replaceChildren(bindText(h('p', { className: 'admin-note', testid: 'passage-loading' }), 'passage.loading'));
  view.element.dataset.chunkId = String(chunkId);
  if (!view.element.open) view.element.showModal();
  view.close.focus();
  let found;
  try {
    found = await api.getPassage(chunkId);
  } catch (error) {
    if (mine !== generation) return;
    const message = h('p', { className: 'form-error', testid: 'passage-error', attrs: { role: 'alert' } });
    if (error instanceof api.ApiError && error.status === 404) bindText(message, 'passage.not_found');
    else if (error instanceof api.ApiError && error.status === 0) bindText(message, 'error.network');
    else bindText(message, 'admin.error.api', { message: error.message });
    view.body.replaceChildren(message);
    return;
  }
  if (mine !== generation) return;
  render(view, found ?? {});
}

/** Closes the viewer if it is open. */
export function closePassage() {
  if (dialog?.element.open) dialog.element.close();
}

function ensureDialog() {
  if (dialog && dialog.element.isConnected) return dialog;
  const titleId = uniqueId('passage-title');
  const title = h('h2', { className: 'passage-title', id: titleId, testid: 'passage-title' });
  const close = h('button', { type: 'button', className: 'icon-button passage-close', testid: 'passage-close' },
    h('span', { attrs: { 'aria-hidden': 'true' }, text: '×' }));
  bindAttr(close, 'aria-label', 'passage.close');
  const body = h('div', { className: 'passage-body' });
  const element = h('dialog', { className: 'passage-dialog', testid: 'passage', attrs: { 'aria-labelledby': titleId } },
    h('header', { className: 'passage-header' }, title, close), body);
  const view = { element, title, close, body, opener: null };
  close.addEventListener('click', () => element.close());
  element.addEventListener('click', (event) => {
    if (event.target === element) element.close(); // A click on the backdrop.
  });
  element.addEventListener('close', () => {
    generation += 1;
    if (view.opener?.isConnected) view.opener.focus();
    view.opener = null;
  });
  document.body.appendChild(element);
  dialog = view;
  return view;
}

function render(view, found) {
  const passage = isObject(found.passage) ? found.passage : {};
  view.title.removeAttribute('data-i18n');
  view.title.textContent = text(passage.title) || text(passage.path) || text(passage.chunk_id);
  const headings = Array.isArray(passage.heading_path) ? passage.heading_path.map(text).filter(Boolean) : [];
  const facts = [
    ['citation.kb', text(passage.kb), 'passage-kb'],
    ['citation.path', text(passage.path), 'passage-path'],
    ['citation.section', headings.join(' › '), 'passage-headings'],
    ...locationFact(passage.location),
  ].filter(([, value]) => value !== '');
  const list = h('dl', { className: 'facts passage-facts' }, facts.map(([key, value, testid]) =>
    h('div', { className: 'fact' }, bindText(h('dt'), key), h('dd', { testid, text: value }))));
  const context = (chunks, testid) => (Array.isArray(chunks) ? chunks : []).filter(isObject).map((chunk) =>
    h('p', { className: 'passage-context', testid, data: { chunkId: text(chunk.chunk_id) } , text: text(chunk.text) }));
  const cited = h('blockquote', { className: 'passage-cited', testid: 'passage-text', attrs: { 'aria-current': 'true' } },
    bindText(h('span', { className: 'passage-cited-label' }), 'passage.cited'),
    h('span', { className: 'passage-cited-text', text: text(passage.text) }));
  view.body.replaceChildren(list,
    h('div', { className: 'passage-document', testid: 'passage-document' },
      context(found.before, 'passage-before'), cited, context(found.after, 'passage-after')));
  cited.scrollIntoView({ block: 'nearest' });
}

/** [label key, text, testid] for a location: {kind: lines|pages|paragraphs, start, end} or {lines: [a, b]}. */
function locationFact(location) {
  if (!isObject(location)) return [];
  const units = ['lines', 'pages', 'paragraphs'];
  let unit = null;
  let from = '';
  let to = '';
  if (units.includes(location.kind)) {
    unit = location.kind;
    from = text(location.start);
    to = text(location.end) || from;
  } else {
    unit = units.find((name) => Array.isArray(location[name]) && location[name].length > 0) ?? null;
    if (unit) [from, to = from] = location[unit].map(text);
  }
  if (!unit || !from) return [];
  return [[`citation.${unit}`, from === to ? from : `${from}–${to}`, 'passage-location']];
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}
