// The conversation pane: the open conversation's header (its title and the memory toggle), its
// messages, the composer, and the live answer while a run streams. It owns the run lifecycle
// on the page — posting a message, following the run's events, re-attaching to a run that is
// still going after a reload, turning the live bubble into the stored answer exactly once, and
// showing why a run failed. What the agent did besides writing (route, tools, cards,
// confirmations, citations) is drawn by agent.js from the live events, or for stored answers
// from a replay of their run. The conversation's memory is memory.js's panel; this pane tells
// it which conversation is open and when a run ended, and scrolls to a memory's source message.

import { AGENT_EVENTS, createAnswerView } from './agent.js';
import * as api from './api.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, bindTime } from './i18n.js';
import { renderMarkdown } from './markdown.js';
import { createMemoryPanel } from './memory.js';
import { followRun, replayRun } from './stream.js';
import { createTimeline } from './timeline.js';

const ACTIVE_STATUSES = new Set(['queued', 'running']);
/** Titles of new conversations are the first line of the first message, cut to this length. */
const MAX_TITLE_CHARS = 60;
/** Within this distance of the bottom, new text keeps the view scrolled to the bottom. */
const STICK_TO_BOTTOM_PX = 120;
/** Tallest the composer grows before it scrolls. */
const MAX_COMPOSER_PX = 240;
const SUGGESTION_KEYS = ['suggest.disk', 'suggest.nginx', 'suggest.lock'];
/** How long a message the memory panel jumped to stays highlighted. */
const HIGHLIGHT_MS = 2000;

/** Creates the conversation pane. `onActivity` is told when the conversation list changed. */
export function createChatView({ onActivity }) {
  return new ChatView(onActivity);
}

class ChatView {
  constructor(onActivity) {
    this.onActivity = onActivity;
    this.conversationId = null;
    this.generation = 0;
    this.live = null;
    this.sending = false;
    this.timelines = [];
    this.replays = [];

    this.thread = h('div', { className: 'thread' });
    this.scroller = h('section', { className: 'messages', attrs: { tabindex: '-1' } }, this.thread);
    bindAttr(this.scroller, 'aria-label', 'chat.log_label');
    this.banner = h('div', { className: 'banner', hidden: true, attrs: { role: 'alert' } });
    this.buildComposer();
    this.memory = createMemoryPanel({ showMessage: (id) => this.showMessage(id) });
    this.title = h('h2', { className: 'chat-title', testid: 'chat-title' });
    this.header = h('header', { className: 'chat-header', hidden: true }, this.title, this.memory.toggle);
    this.highlight = null;
    // The panel comes right after its toggle for keyboard order; style.css docks it on the right.
    this.element = h('main', { className: 'chat' }, this.header,
      h('div', { className: 'chat-body' }, this.memory.element,
        h('div', { className: 'chat-column' }, this.scroller, this.banner, this.composer)));
  }

  /** Opens a conversation by id, or the empty "new chat" state for null. */
  async show(id, { allowRefetch = true } = {}) {
    this.reset();
    this.conversationId = id === null ? null : String(id);
    this.setHeader(this.conversationId, null);
    if (id === null) {
      this.thread.replaceChildren(this.emptyState());
      return;
    }
    const mine = this.generation;
    this.thread.replaceChildren(bindText(h('p', { className: 'thread-loading' }), 'chat.loading'));
    let conversation;
    try {
      conversation = await api.getConversation(id);
    } catch (error) {
      if (mine !== this.generation) return;
      this.thread.replaceChildren();
      this.setHeader(null, null);
      this.showError(error);
      return;
    }
    if (mine !== this.generation) return;
    this.renderConversation(conversation, mine, allowRefetch);
  }

  focusComposer() {
    this.textarea.focus();
  }

  /** Stops streaming and forgets the open conversation (on sign-out). */
  dispose() {
    this.reset();
    this.memory.dispose();
  }

  /** Shows the header (title and memory toggle) of an open conversation; hides it for null. */
  setHeader(id, title) {
    this.header.hidden = id === null;
    this.memory.setConversation(id);
    if (typeof title === 'string' && title.trim()) {
      delete this.title.dataset.i18n;
      this.title.textContent = title;
    } else if (title !== null) {
      bindText(this.title, 'nav.untitled');
    } else {
      this.title.replaceChildren();
    }
  }

  /**
   * Scrolls to the drawn message with this id and highlights it for a moment; false when it
   * is not on the page (the memory panel then says so).
   */
  showMessage(id) {
    const target = [...this.thread.querySelectorAll('[data-testid="message"]')].find((element) => element.dataset.messageId === String(id));
    if (!target) return false;
    if (this.highlight) {
      clearTimeout(this.highlight.timer);
      this.highlight.element.classList.remove('is-highlighted');
    }
    const smooth = !window.matchMedia('(prefers-reduced-motion: reduce)').matches;
    target.scrollIntoView({ block: 'center', behavior: smooth ? 'smooth' : 'auto' });
    target.classList.add('is-highlighted');
    target.setAttribute('tabindex', '-1');
    target.focus({ preventScroll: true });
    const highlight = { element: target, timer: setTimeout(() => {
      target.classList.remove('is-highlighted');
      if (this.highlight === highlight) this.highlight = null;
    }, HIGHLIGHT_MS) };
    this.highlight = highlight;
    return true;
  }

  reset() {
    this.generation += 1;
    if (this.live) {
      this.live.stream?.close();
      if (this.live.frame) cancelAnimationFrame(this.live.frame);
      this.live = null;
    }
    for (const timeline of this.timelines) timeline.dispose();
    this.timelines = [];
    for (const replay of this.replays) replay.close();
    this.replays = [];
    this.hideError();
    this.setComposerMode('send');
  }

  // --- Drawing stored messages -------------------------------------------------------------

  renderConversation(conversation, mine, allowRefetch) {
    this.setHeader(this.conversationId, typeof conversation.title === 'string' ? conversation.title : '');
    const messages = conversation.messages ?? [];
    const answeredTurns = new Set(messages.filter((m) => m.role === 'assistant').map((m) => m.turn));
    const runOfTurn = new Map(messages.filter((m) => m.run_id).map((m) => [m.turn, m.run_id]));
    const unanswered = [];
    this.thread.replaceChildren();
    for (const message of messages) {
      const element = this.messageElement(message, message.run_id ?? runOfTurn.get(message.turn) ?? null);
      this.thread.appendChild(element);
      if (message.role === 'user' && message.run_id && !answeredTurns.has(message.turn)) unanswered.push({ message, element });
    }
    if (messages.length === 0) this.thread.appendChild(this.emptyState());
    this.scrollToBottom();
    for (const entry of unanswered) this.attachToRun(entry, mine, allowRefetch);
  }

  /** A user message whose turn has no answer yet: follow its run, or say why it ended. */
  async attachToRun({ message, element }, mine, allowRefetch) {
    let run;
    try {
      run = await api.getRun(message.run_id);
    } catch {
      return; // The messages are still useful without the run's state.
    }
    if (mine !== this.generation) return;
    if (ACTIVE_STATUSES.has(run.status)) {
      if (!this.live) this.startLive(message.run_id, message.turn, element);
    } else if (run.status === 'failed' || run.status === 'cancelled') {
      element.after(this.runNotice(message.run_id, run.status, run.failure_reason));
    } else if (run.status === 'completed' && allowRefetch) {
      // The answer was stored between the two requests: draw the conversation again.
      this.show(this.conversationId, { allowRefetch: false });
    }
  }

  messageElement(message, runId) {
    const role = message.role === 'user' ? 'user' : 'assistant';
    const body = h('div', { className: 'message-body markdown', testid: 'message-body' });
    const meta = h('div', { className: 'message-meta' },
      bindText(h('span', { className: 'message-author' }), `author.${role}`),
      message.created_at ? bindTime(h('time', { className: 'message-time' }), message.created_at) : null);
    const article = h('article', {
      className: `message message-${role}`,
      testid: 'message',
      data: { role, messageId: message.id, turn: message.turn, runId },
    }, meta);
    if (role === 'user') {
      body.appendChild(renderMarkdown(message.content ?? ''));
      article.appendChild(body);
      if (message.has_original === true) article.appendChild(this.originalToggle(message));
      return article;
    }
    const agent = createAnswerView();
    const storedCitations = Array.isArray(message.citations) && message.citations.length > 0;
    agent.setCitations(message.citations);
    if (message.route) agent.setRoute(message.route);
    agent.renderText(body, message.content ?? '');
    article.append(...agent.before, body, ...agent.after);
    if (runId) {
      const timeline = createTimeline(runId, { external: true });
      this.timelines.push(timeline);
      article.appendChild(h('div', { className: 'message-footer' }, timeline.element));
      // The cards, questions and tool calls of a stored answer live in its run's events.
      this.replays.push(replayRun(runId, {
        onEvent: (event) => {
          timeline.record(event);
          if (!AGENT_EVENTS.has(event.type) || (event.type === 'citation' && storedCitations)) return;
          const stick = this.nearBottom();
          if (agent.apply(event)) agent.renderText(body, message.content ?? '');
          if (stick) this.scrollToBottom();
        },
        onDone: (ok) => timeline.finish(ok),
      }));
    }
    return article;
  }

  /** "Show original" on a masked message whose author kept the text as typed. */
  originalToggle(message) {
    const shown = h('pre', { className: 'message-original', testid: 'message-original', hidden: true });
    const button = bindText(h('button', { type: 'button', className: 'button button-small', testid: 'show-original' }), 'message.show_original');
    button.addEventListener('click', async () => {
      if (!shown.hidden) {
        shown.hidden = true;
        bindText(button, 'message.show_original');
        return;
      }
      try {
        const original = await api.getMessageOriginal(this.conversationId, message.id);
        shown.textContent = typeof original.content === 'string' ? original.content : '';
        shown.hidden = false;
        bindText(button, 'message.hide_original');
      } catch (error) {
        this.showError(error);
      }
    });
    return h('div', { className: 'message-footer' }, button, shown);
  }

  runNotice(runId, status, reason, timeline = null) {
    const text = h('p', { className: 'run-status', testid: 'run-status', data: { status }, attrs: { role: 'status' } });
    if (status === 'failed') bindText(text, reason ? 'run.failed' : 'run.failed_unknown', { reason: reason ?? '' });
    else bindText(text, 'run.cancelled');
    const panel = timeline ?? createTimeline(runId);
    if (!timeline) this.timelines.push(panel);
    return h('div', { className: `run-notice run-notice-${status}`, data: { runId } }, text, panel.element);
  }

  emptyState() {
    const suggestions = SUGGESTION_KEYS.map((key) => {
      const button = h('button', { type: 'button', className: 'suggestion' });
      bindText(button, key);
      button.addEventListener('click', () => {
        this.textarea.value = button.textContent;
        this.autosize();
        this.textarea.focus();
      });
      return button;
    });
    return h('div', { className: 'empty-state' },
      h('span', { className: 'brand-mark brand-mark-large', attrs: { 'aria-hidden': 'true' } }),
      bindText(h('h1', { className: 'empty-title' }), 'chat.empty_title'),
      bindText(h('p', { className: 'empty-hint' }), 'chat.empty_hint'),
      h('div', { className: 'suggestions' }, suggestions));
  }

  // --- Sending and the live answer ---------------------------------------------------------

  async send() {
    const content = this.textarea.value;
    if (!content.trim() || this.live || this.sending) return;
    this.sending = true;
    this.sendButton.disabled = true;
    this.hideError();
    const mine = this.generation;
    try {
      if (this.conversationId === null) {
        const created = await api.createConversation(titleFrom(content));
        if (mine !== this.generation) return;
        this.conversationId = String(created.id);
        this.setHeader(this.conversationId, typeof created.title === 'string' ? created.title : titleFrom(content));
        // app.js sees that this id is already open and does not reload it.
        window.location.hash = `#/c/${encodeURIComponent(created.id)}`;
      }
      const accepted = await api.postMessage(this.conversationId, content, { keepOriginal: this.keepOriginal.checked });
      if (mine !== this.generation) return;
      this.textarea.value = '';
      this.autosize();
      this.thread.querySelector('.empty-state')?.remove();
      const userMessage = { id: accepted.message_id, turn: accepted.turn, role: 'user', content, run_id: accepted.run_id, created_at: Math.floor(Date.now() / 1000) };
      const element = this.messageElement(userMessage, accepted.run_id);
      this.thread.appendChild(element);
      this.startLive(accepted.run_id, accepted.turn, element);
      this.scrollToBottom();
      this.onActivity();
    } catch (error) {
      if (mine === this.generation) this.showError(error);
    } finally {
      this.sending = false;
      this.sendButton.disabled = false;
    }
  }

  startLive(runId, turn, userElement) {
    const body = h('div', { className: 'message-body markdown', testid: 'message-body', attrs: { 'aria-live': 'polite' } });
    const status = h('p', { className: 'run-status', testid: 'run-status', data: { status: 'queued' }, attrs: { role: 'status' } });
    bindText(status, 'run.queued');
    const timeline = createTimeline(runId, { live: true });
    this.timelines.push(timeline);
    const agent = createAnswerView();
    const bubble = h('article', {
      className: 'message message-assistant is-live',
      testid: 'message',
      data: { role: 'assistant', live: 'true', turn, runId },
      attrs: { 'aria-busy': 'true' },
    },
    h('div', { className: 'message-meta' },
      bindText(h('span', { className: 'message-author' }), 'author.assistant'),
      h('span', { className: 'typing', attrs: { 'aria-hidden': 'true' } }, h('span'), h('span'), h('span'))),
    ...agent.before, body, status, ...agent.after, h('div', { className: 'message-footer' }, timeline.element));
    userElement.after(bubble);
    const live = { runId, turn, text: '', phase: 'queued', bubble, body, status, timeline, agent, userElement, frame: null, stream: null, stopping: false };
    this.live = live;
    this.setComposerMode('stop');
    this.follow(live, 0);
  }

  follow(live, after) {
    live.stream = followRun(live.runId, {
      after,
      onEvent: (event) => this.onRunEvent(live, event),
      onConnection: (state) => {
        if (live !== this.live) return;
        if (state === 'reconnecting') this.setStatus(live, 'run.reconnecting');
        else this.setStatus(live, live.phase === 'queued' ? 'run.queued' : 'run.running');
      },
      onLost: () => this.onStreamLost(live),
    });
  }

  onRunEvent(live, event) {
    if (live !== this.live) return;
    live.timeline.record(event);
    if (AGENT_EVENTS.has(event.type)) {
      const stick = this.nearBottom();
      if (live.agent.apply(event)) this.scheduleRender(live);
      if (stick) this.scrollToBottom();
    }
    switch (event.type) {
      case 'run.started':
        live.phase = 'running';
        this.setStatus(live, 'run.running');
        break;
      case 'run.resumed':
        live.phase = 'running';
        // The answer continues from the characters the server kept before it restarted.
        if (Number.isInteger(event.data.resumed_chars)) live.text = firstCodePoints(live.text, event.data.resumed_chars);
        this.setStatus(live, 'run.resumed', { attempt: event.data.attempt ?? 2 });
        this.scheduleRender(live);
        break;
      case 'tool.started':
        live.phase = 'running';
        this.setStatus(live, 'run.using_tool', { name: typeof event.data.name === 'string' ? event.data.name : '' });
        break;
      case 'tool.completed':
        this.setStatus(live, 'run.running');
        break;
      case 'message.delta':
        if (live.phase !== 'running' || live.status.dataset.i18n !== 'run.running') {
          live.phase = 'running';
          this.setStatus(live, 'run.running');
        }
        live.text += typeof event.data.text === 'string' ? event.data.text : '';
        this.scheduleRender(live);
        break;
      case 'run.completed':
      case 'run.failed':
      case 'run.cancelled':
        this.finishLive(live, event);
        break;
      default:
        break;
    }
  }

  scheduleRender(live) {
    if (live.frame) return;
    live.frame = requestAnimationFrame(() => {
      live.frame = null;
      this.renderLiveText(live);
    });
  }

  renderLiveText(live) {
    const stick = this.nearBottom();
    live.agent.renderText(live.body, live.text);
    if (stick) this.scrollToBottom();
  }

  /** Turns the live bubble into the stored answer, or into a notice when there is none. */
  async finishLive(live, event) {
    if (live.frame) cancelAnimationFrame(live.frame);
    live.frame = null;
    live.stream?.close();
    this.live = null;
    this.setComposerMode('send');
    this.renderLiveText(live);
    const bubble = live.bubble;
    delete bubble.dataset.live;
    bubble.classList.remove('is-live');
    bubble.setAttribute('aria-busy', 'false');
    bubble.querySelector('.typing')?.remove();
    const outcome = event.type.slice('run.'.length);
    if (outcome === 'completed' && event.data.message_id !== undefined) bubble.dataset.messageId = String(event.data.message_id);

    const mine = this.generation;
    let stored = null;
    try {
      const conversation = await api.getConversation(this.conversationId);
      stored = (conversation.messages ?? []).find((m) => m.role === 'assistant'
        && (bubble.dataset.messageId !== undefined ? String(m.id) === bubble.dataset.messageId : m.turn === live.turn)) ?? null;
    } catch {
      stored = null; // Keep the streamed text; a reload shows the stored one.
    }
    if (mine !== this.generation) return;
    if (stored) {
      this.becomeStored(live, stored);
    } else if (outcome === 'completed') {
      live.status.remove();
    } else {
      this.becomeNotice(live, outcome, event.data.reason);
    }
    this.onActivity();
    this.memory.refresh(); // The run may have remembered something, or compacted older messages.
  }

  becomeStored(live, stored) {
    const bubble = live.bubble;
    bubble.dataset.messageId = String(stored.id);
    live.agent.setCitations(stored.citations);
    live.agent.renderText(live.body, stored.content ?? '');
    live.body.removeAttribute('aria-live');
    live.status.remove();
    if (stored.created_at) bubble.querySelector('.message-meta').appendChild(bindTime(h('time', { className: 'message-time' }), stored.created_at));
  }

  becomeNotice(live, outcome, reason) {
    if (live.text.trim() === '' && !live.agent.hasContent()) {
      const notice = this.runNotice(live.runId, outcome, reason, live.timeline);
      live.bubble.replaceWith(notice);
      return;
    }
    // Keep what was written, marked as incomplete; a reload shows only the notice.
    live.bubble.classList.add('message-partial');
    live.status.dataset.status = outcome;
    if (outcome === 'failed') bindText(live.status, reason ? 'run.failed' : 'run.failed_unknown', { reason: reason ?? '' });
    else bindText(live.status, 'run.cancelled');
  }

  async onStreamLost(live) {
    if (live !== this.live) return;
    const mine = this.generation;
    let run = null;
    try {
      run = await api.getRun(live.runId);
    } catch {
      run = null;
    }
    if (mine !== this.generation || live !== this.live) return;
    if (run && !ACTIVE_STATUSES.has(run.status)) {
      this.show(this.conversationId); // Finished while we could not listen: draw what was stored.
      return;
    }
    this.setStatus(live, 'run.stream_lost');
    live.status.dataset.status = 'error';
    const retry = h('button', { type: 'button', className: 'button button-small', testid: 'run-retry' });
    bindText(retry, 'run.retry');
    retry.addEventListener('click', () => {
      retry.remove();
      this.setStatus(live, 'run.reconnecting');
      this.follow(live, live.stream.lastSeq());
    });
    live.status.append(' ', retry);
  }

  async stop() {
    const live = this.live;
    if (!live || live.stopping) return;
    live.stopping = true;
    this.stopButton.disabled = true;
    bindText(this.stopButton, 'composer.stopping');
    try {
      await api.cancelRun(live.runId);
    } catch (error) {
      if (live !== this.live) return;
      live.stopping = false;
      this.setComposerMode('stop');
      this.showError(error);
    }
  }

  setStatus(live, key, params) {
    if (live.status.dataset.status !== 'error') live.status.dataset.status = live.phase;
    bindText(live.status, key, params);
  }

  // --- Composer ----------------------------------------------------------------------------

  buildComposer() {
    const id = uniqueId('composer');
    this.textarea = h('textarea', { id, className: 'composer-input', testid: 'composer', rows: 1, attrs: { autocomplete: 'off' } });
    bindAttr(this.textarea, 'placeholder', 'composer.placeholder');
    this.textarea.addEventListener('input', () => this.autosize());
    this.textarea.addEventListener('keydown', (event) => {
      if (event.key !== 'Enter' || event.shiftKey || event.isComposing || event.keyCode === 229) return;
      event.preventDefault();
      if (!this.live) this.send();
    });
    this.sendButton = bindText(h('button', { type: 'submit', className: 'button button-primary composer-send', testid: 'send' }), 'composer.send');
    this.stopButton = bindText(h('button', { type: 'button', className: 'button button-danger composer-stop', testid: 'stop', hidden: true }), 'composer.stop');
    this.stopButton.addEventListener('click', () => this.stop());
    const label = bindText(h('label', { htmlFor: id, className: 'visually-hidden' }), 'composer.label');
    // Secrets are always masked before a message is stored; this keeps the text as typed
    // beside it, for its author alone.
    this.keepOriginal = h('input', { type: 'checkbox', className: 'composer-keep-input', testid: 'keep-original' });
    const keep = h('label', { className: 'composer-keep' }, this.keepOriginal, ' ',
      bindText(h('span'), 'composer.keep_original'));
    this.composer = h('form', { className: 'composer' },
      label, h('div', { className: 'composer-box' }, this.textarea, this.sendButton, this.stopButton), keep);
    this.composer.addEventListener('submit', (event) => {
      event.preventDefault();
      this.send();
    });
  }

  setComposerMode(mode) {
    if (!this.sendButton) return;
    const streaming = mode === 'stop';
    this.sendButton.hidden = streaming;
    this.stopButton.hidden = !streaming;
    this.stopButton.disabled = false;
    bindText(this.stopButton, 'composer.stop');
  }

  autosize() {
    this.textarea.style.height = 'auto';
    this.textarea.style.height = `${Math.min(this.textarea.scrollHeight, MAX_COMPOSER_PX)}px`;
  }

  // --- Errors and scrolling -----------------------------------------------------------------

  showError(error) {
    if (error instanceof api.ApiError && error.status === 401) return; // app.js shows sign-in.
    const text = h('span', { className: 'banner-text' });
    if (!(error instanceof api.ApiError)) bindText(text, 'error.generic', { message: String(error) });
    else if (error.status === 0) bindText(text, 'error.network');
    else if (error.status === 404) bindText(text, 'error.not_found');
    else bindText(text, 'error.generic', { message: error.message });
    const dismiss = bindText(h('button', { type: 'button', className: 'button button-small button-quiet' }), 'error.dismiss');
    dismiss.addEventListener('click', () => this.hideError());
    this.banner.replaceChildren(text, dismiss);
    this.banner.hidden = false;
  }

  hideError() {
    this.banner.hidden = true;
    this.banner.replaceChildren();
  }

  nearBottom() {
    const { scrollTop, scrollHeight, clientHeight } = this.scroller;
    return scrollHeight - scrollTop - clientHeight < STICK_TO_BOTTOM_PX;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }
}

function titleFrom(content) {
  const firstLine = content.trim().split('\n')[0].trim();
  const chars = [...firstLine];
  return chars.length > MAX_TITLE_CHARS ? `${chars.slice(0, MAX_TITLE_CHARS - 1).join('')}…` : firstLine;
}

/** The first `count` Unicode code points of text (what Rust counts as chars). */
function firstCodePoints(text, count) {
  const chars = [...text];
  return chars.length > count ? chars.slice(0, count).join('') : text;
}
