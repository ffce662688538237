// What the chat agent did for one assistant answer, drawn around its text: the route it chose
// (intent, mode, source), its tool calls, fact cards, confirmation cards, a clarification
// question, degraded-run notices, and the cited passages — markers in the text, a list of
// sources under it, and a panel with the passage a marker opens. A live answer feeds it the
// run's events as they arrive; a stored answer feeds it the replayed events and the
// message's stored citations. A citation that names its chunk (`chunk_id`) also opens the
// passage viewer, which shows it in its document's context. Everything from events reaches
// the DOM as text.

import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, hasTranslation } from './i18n.js';
import { createConfirmation, renderCard, token } from './cards.js';
import { renderMarkdown } from './markdown.js';
import { openPassage } from './passage.js';

/** The event types this view draws (the others are the run's lifecycle and its text). */
export const AGENT_EVENTS = new Set(['route.decided', 'tool.started', 'tool.completed', 'citation', 'card',
  'confirmation.required', 'clarification.needed', 'run.degraded', 'answer.basis']);

/** Creates the agent parts of one answer. */
export function createAnswerView() {
  return new AnswerView();
}

class AnswerView {
  constructor() {
    this.citations = new Map();
    this.toolRows = new Map();
    this.confirmations = new Map();
    /** What was drawn already, so that a resumed run repeating an event does not draw it twice. */
    this.seen = new Set();
    this.question = null;
    this.openCitation = null;
    this.openButton = null;

    this.route = h('div', { className: 'route-chips', testid: 'route', hidden: true, attrs: { role: 'group' } });
    bindAttr(this.route, 'aria-label', 'route.label');
    this.tools = h('ol', { className: 'tool-steps', testid: 'tool-steps', hidden: true });
    bindAttr(this.tools, 'aria-label', 'tool.label');
    this.cards = h('div', { className: 'agent-cards', hidden: true });
    this.actions = h('div', { className: 'agent-actions', hidden: true });
    this.notices = h('div', { className: 'agent-notices', hidden: true });
    /** Says above the text when a knowledge answer is quoted passages or an abstention. */
    this.basis = h('p', { className: 'answer-basis', testid: 'answer-basis', hidden: true });
    this.sourceList = h('ol', { className: 'source-list' });
    this.sources = h('section', { className: 'sources', testid: 'sources', hidden: true },
      bindText(h('h3', { className: 'sources-title' }), 'citation.sources'), this.sourceList);
    this.panelId = uniqueId('citation');
    this.panel = h('aside', { className: 'citation-panel', id: this.panelId, testid: 'citation-panel', hidden: true, attrs: { tabindex: '-1' } });
    bindAttr(this.panel, 'aria-label', 'citation.panel_label');
  }

  /** The parts drawn above the answer text. */
  get before() {
    return [this.route, this.tools, this.cards, this.basis];
  }

  /** The parts drawn below the answer text. */
  get after() {
    return [this.actions, this.notices, this.sources, this.panel];
  }

  /** Whether anything besides text was shown (cards, questions, actions). */
  hasContent() {
    return !this.cards.hidden || !this.actions.hidden;
  }

  /**
   * Applies one run event. Returns true when the answer text must be drawn again (a new
   * citation turns its markers into links).
   */
  apply(event) {
    const data = event.data ?? {};
    switch (event.type) {
      case 'route.decided':
        this.setRoute(data);
        return false;
      case 'tool.started':
      case 'tool.completed':
        this.recordTool(event.type, data);
        return false;
      case 'citation':
        return this.addCitation(data);
      case 'card':
        if (this.once(`card ${JSON.stringify([data.kind, data.data])}`)) {
          this.cards.appendChild(renderCard(data.kind, data.data));
          this.cards.hidden = false;
        }
        return false;
      case 'confirmation.required':
        this.addConfirmation(data);
        return false;
      case 'clarification.needed':
        this.setQuestion(data.question);
        return true; // The text may be the question itself, shown once.
      case 'answer.basis':
        if (data.basis === 'extractive' || data.basis === 'abstained') {
          bindText(this.basis, `agent.basis_${data.basis}`);
          this.basis.dataset.basis = data.basis;
          this.basis.hidden = false;
        }
        return false;
      case 'run.degraded':
        if (this.once(`degraded ${text(data.reason)}`)) {
          this.notices.appendChild(bindText(h('p', { className: 'degraded-notice', testid: 'degraded' }), 'agent.degraded', { reason: text(data.reason) }));
          this.notices.hidden = false;
        }
        return false;
      default:
        return false;
    }
  }

  /** True the first time a key is seen. */
  once(key) {
    if (this.seen.has(key)) return false;
    this.seen.add(key);
    return true;
  }

  /** Draws markdown into `body`, with citation markers of known passages as buttons. */
  renderText(body, markdown) {
    body.replaceChildren(renderMarkdown(markdown, document, {
      citations: this.citations,
      citationElement: (n) => this.citationButton(n),
    }));
    // A clarification that is the whole answer is shown once, as the question.
    const same = this.question !== null && String(markdown ?? '').trim() === this.question.trim();
    body.classList.toggle('is-question', same);
  }

  // --- Route ------------------------------------------------------------------------------------

  setRoute(route) {
    if (!route || typeof route !== 'object') return;
    const chips = [
      labelled(h('span', { className: 'chip chip-intent', testid: 'route-intent', data: { value: token(route.intent) } }), 'intent', route.intent),
      labelled(h('span', { className: 'chip chip-mode', testid: 'route-mode', data: { value: token(route.mode) } }), 'mode', route.mode),
    ];
    const source = labelled(h('span'), 'source', route.source);
    const confidence = typeof route.confidence === 'number' && Number.isFinite(route.confidence)
      ? h('span', { className: 'chip-confidence', text: `${Math.round(Math.min(1, Math.max(0, route.confidence)) * 100)}%` })
      : null;
    chips.push(h('span', { className: 'chip chip-source', testid: 'route-source', data: { value: token(route.source) } }, source, confidence ? ' · ' : null, confidence));
    if (text(route.incident_id)) chips.push(bindText(h('span', { className: 'chip chip-ref', testid: 'route-incident' }), 'route.incident', { id: text(route.incident_id) }));
    if (text(route.diagnostic_task_id)) chips.push(bindText(h('span', { className: 'chip chip-ref', testid: 'route-diagnostic' }), 'route.diagnostic', { id: text(route.diagnostic_task_id) }));
    if (text(route.blocked_reason)) chips.push(bindText(h('span', { className: 'chip chip-blocked', testid: 'route-blocked' }), 'route.blocked', { reason: text(route.blocked_reason) }));
    this.route.replaceChildren(...chips);
    this.route.hidden = false;
  }

  // --- Tools ------------------------------------------------------------------------------------

  recordTool(type, data) {
    const callId = text(data.call_id) || `${text(data.name)}-${this.toolRows.size}`;
    let row = this.toolRows.get(callId);
    if (!row) {
      row = {
        element: h('li', { className: 'tool-step', testid: 'tool-step', data: { callId } }),
        name: h('code', { className: 'tool-name' }),
        status: h('span', { className: 'tool-status' }),
        summary: h('span', { className: 'tool-summary', testid: 'tool-summary' }),
      };
      row.element.append(h('span', { className: 'tool-icon', attrs: { 'aria-hidden': 'true' } }), row.name, row.status, row.summary);
      this.toolRows.set(callId, row);
      this.tools.appendChild(row.element);
      this.tools.hidden = false;
    }
    row.name.textContent = text(data.name);
    const status = type === 'tool.started' ? 'running' : token(data.status);
    row.element.dataset.status = status;
    bindText(row.status, hasTranslation(`tool.status.${status}`) ? `tool.status.${status}` : 'tool.status.other', { status: text(data.status) });
    row.summary.textContent = type === 'tool.completed' ? text(data.summary) : '';
  }

  // --- Cards and questions ------------------------------------------------------------------------

  addConfirmation(data) {
    const id = text(data.action_id);
    if (this.confirmations.has(id)) return;
    const confirmation = createConfirmation(data);
    this.confirmations.set(id, confirmation);
    this.actions.appendChild(confirmation.element);
    this.actions.hidden = false;
    confirmation.refresh();
  }

  setQuestion(question) {
    this.question = text(question);
    const box = h('div', { className: 'clarification', testid: 'clarification', attrs: { role: 'note' } },
      bindText(h('span', { className: 'clarification-label' }), 'clarify.label'),
      h('p', { className: 'clarification-question', testid: 'clarification-question', text: this.question }));
    this.actions.querySelector('.clarification')?.remove();
    this.actions.prepend(box);
    this.actions.hidden = false;
  }

  // --- Citations ---------------------------------------------------------------------------------

  /** Adds a message's stored citations to the known passages. */
  setCitations(list) {
    if (!Array.isArray(list)) return;
    for (const citation of list) this.addCitation(citation);
  }

  addCitation(citation) {
    if (!citation || typeof citation !== 'object') return false;
    const n = Number(citation.n);
    if (!Number.isInteger(n) || n < 1) return false;
    const isNew = !this.citations.has(n);
    this.citations.set(n, citation);
    this.renderSources();
    if (this.openCitation === n) this.fillPanel(n);
    return isNew;
  }

  renderSources() {
    const items = [...this.citations.keys()].sort((a, b) => a - b).map((n) => {
      const citation = this.citations.get(n);
      const button = h('button', {
        type: 'button',
        className: this.openCitation === n ? 'source-item is-open' : 'source-item',
        testid: 'source-item',
        data: { n },
        attrs: { 'aria-controls': this.panelId, 'aria-expanded': String(this.openCitation === n) },
        on: { click: () => this.toggleCitation(n, button) },
      },
      h('span', { className: 'citation-number', text: String(n) }),
      h('span', { className: 'source-title', text: titleOf(citation) }),
      h('span', { className: 'source-where', text: [text(citation.kb), text(citation.path)].filter(Boolean).join(' · ') }));
      return h('li', {}, button);
    });
    this.sourceList.replaceChildren(...items);
    this.sources.hidden = items.length === 0;
  }

  citationButton(n) {
    const citation = this.citations.get(n);
    const button = h('button', {
      type: 'button',
      className: this.openCitation === n ? 'citation-ref is-open' : 'citation-ref',
      testid: 'citation-ref',
      data: { n },
      text: String(n),
      attrs: { 'aria-controls': this.panelId, 'aria-expanded': String(this.openCitation === n) },
      on: { click: () => this.toggleCitation(n, button) },
    });
    bindAttr(button, 'aria-label', 'citation.ref_label', { n, title: titleOf(citation) });
    bindAttr(button, 'title', 'citation.ref_label', { n, title: titleOf(citation) });
    return button;
  }

  toggleCitation(n, opener) {
    if (this.openCitation === n && !this.panel.hidden) {
      this.closeCitation();
      return;
    }
    this.openCitation = n;
    this.openButton = opener;
    this.fillPanel(n);
    this.panel.hidden = false;
    this.syncExpanded();
    this.panel.focus({ preventScroll: true });
    this.panel.scrollIntoView({ block: 'nearest' });
  }

  closeCitation() {
    const opener = this.openButton;
    this.openCitation = null;
    this.openButton = null;
    this.panel.hidden = true;
    this.syncExpanded();
    if (opener?.isConnected) opener.focus();
  }

  syncExpanded() {
    const root = this.panel.closest('.message') ?? this.panel.parentElement;
    for (const button of root?.querySelectorAll('.citation-ref, .source-item') ?? []) {
      button.setAttribute('aria-expanded', String(Number(button.dataset.n) === this.openCitation));
      button.classList.toggle('is-open', Number(button.dataset.n) === this.openCitation);
    }
  }

  /** The passage of citation n, every part set as text. */
  fillPanel(n) {
    const citation = this.citations.get(n) ?? {};
    this.panel.dataset.n = String(n);
    const close = h('button', { type: 'button', className: 'icon-button citation-close', testid: 'citation-close', on: { click: () => this.closeCitation() } },
      h('span', { attrs: { 'aria-hidden': 'true' }, text: '×' }));
    bindAttr(close, 'aria-label', 'citation.close');
    const headings = Array.isArray(citation.heading_path) ? citation.heading_path.map(text).filter(Boolean) : [];
    const facts = [
      ['citation.kb', text(citation.kb)],
      ['citation.path', text(citation.path)],
      ['citation.section', headings.join(' › ')],
      ...locationFacts(citation.location),
    ].filter(([, value]) => value !== '');
    const list = h('dl', { className: 'facts citation-facts' }, facts.map(([key, value, params]) =>
      h('div', { className: 'fact' }, bindText(h('dt'), key, params), h('dd', { text: value }))));
    const chunkId = text(citation.chunk_id);
    let context = null;
    if (chunkId) {
      context = bindText(h('button', { type: 'button', className: 'button button-small citation-context', testid: 'citation-open-passage' }), 'passage.open');
      context.addEventListener('click', () => openPassage(chunkId, context));
    }
    this.panel.replaceChildren(
      h('header', { className: 'citation-header' },
        h('span', { className: 'citation-number', text: String(n) }),
        h('h3', { className: 'citation-title', testid: 'citation-title', text: titleOf(citation) }),
        close),
      list,
      h('blockquote', { className: 'citation-text', testid: 'citation-text', text: text(citation.text) }),
      context);
  }
}

/** A chip's text: the translated name of a known value, the value itself otherwise. */
function labelled(element, kind, value) {
  const key = `${kind}.${token(value)}`;
  if (hasTranslation(key)) bindText(element, key);
  else element.textContent = text(value) || '?';
  return element;
}

/** [label key, text, params] rows for a citation's location (lines, pages or paragraphs). */
function locationFacts(location) {
  if (!location || typeof location !== 'object') return [];
  if (['lines', 'pages', 'paragraphs'].includes(location.kind) && text(location.start)) {
    // The knowledge base's own shape: {kind, start, end}.
    const [from, to] = [text(location.start), text(location.end) || text(location.start)];
    return [[`citation.${location.kind}`, from === to ? from : `${from}–${to}`]];
  }
  for (const unit of ['lines', 'pages', 'paragraphs']) {
    const range = location[unit];
    if (!Array.isArray(range) || range.length === 0) continue;
    const [from, to = from] = range.map((value) => text(value));
    return [[`citation.${unit}`, from === to ? from : `${from}–${to}`]];
  }
  return [];
}

function titleOf(citation) {
  if (!citation) return '';
  return text(citation.title) || text(citation.path) || text(citation.kb);
}

function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}
