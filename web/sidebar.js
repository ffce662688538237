// The navigation on the left: a "New chat" button, the links to the Diagnostics view
// (`#/diagnostics`), Knowledge (`#/knowledge`) and API tokens (`#/tokens`) — and for admins
// Users (`#/users`) and Audit (`#/audit`) — and the user's conversations, newest first, each
// a link to its `#/c/<id>` route. It owns fetching and drawing that list and marking what is
// open; routing itself belongs to app.js.

import * as api from './api.js';
import { h } from './dom.js';
import { bindAttr, bindText, bindTime } from './i18n.js';

/**
 * Creates the sidebar. `onNavigate` is told when a link is followed (even to what is open,
 * which changes no route). `isAdmin` adds the admin screens' links. Returns {element, refresh(),
 * setActive(id), setDiagnosticsActive(on), setScreenActive(name | null)}.
 */
export function createSidebar({ onNewChat, onNavigate = () => {}, isAdmin = false }) {
  const newChat = h('button', { type: 'button', className: 'button button-primary new-chat', testid: 'new-chat', on: { click: onNewChat } },
    h('span', { className: 'new-chat-plus', text: '+', attrs: { 'aria-hidden': 'true' } }),
    bindText(h('span'), 'nav.new_chat'));
  const diagnostics = h('a', { className: 'section-link', href: '#/diagnostics', testid: 'nav-diagnostics', on: { click: () => onNavigate() } },
    h('span', { className: 'section-link-icon', attrs: { 'aria-hidden': 'true' } }),
    bindText(h('span'), 'nav.diagnostics'));
  const screenLinks = new Map(['knowledge', 'tokens', ...(isAdmin ? ['users', 'audit'] : [])].map((name) => [name,
    h('a', { className: `section-link section-link-${name}`, href: `#/${name}`, testid: `nav-${name}`, on: { click: () => onNavigate() } },
      h('span', { className: 'section-link-icon', attrs: { 'aria-hidden': 'true' } }),
      bindText(h('span'), `nav.${name}`))]));
  const heading = bindText(h('h2', { className: 'sidebar-heading', id: 'sidebar-heading' }), 'nav.heading');
  const list = h('ul', { className: 'conversation-list' });
  list.addEventListener('click', (event) => {
    if (event.target.closest('a')) onNavigate();
  });
  const status = h('p', { className: 'sidebar-status', hidden: true });
  // The list comes a page at a time; this fetches the next older page.
  let nextBefore = null;
  const older = bindText(h('button', { type: 'button', className: 'button sidebar-older', testid: 'conversations-older', hidden: true,
    on: { click: () => loadOlder() } }), 'nav.older');
  const element = h('aside', { className: 'sidebar', id: 'sidebar' },
    newChat,
    bindAttr(h('nav', { className: 'section-nav' }, diagnostics, [...screenLinks.values()]), 'aria-label', 'nav.sections'),
    h('nav', { className: 'sidebar-nav', attrs: { 'aria-labelledby': 'sidebar-heading' } }, heading, list, older, status));
  let activeId = null;
  let generation = 0;

  const markActive = () => {
    for (const link of list.querySelectorAll('a')) {
      if (link.dataset.conversationId === String(activeId)) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  };

  const refresh = async () => {
    generation += 1;
    const mine = generation;
    let page;
    try {
      page = await api.listConversations();
    } catch (error) {
      if (mine !== generation) return;
      if (error instanceof api.ApiError && error.status === 401) return;
      bindText(status, 'nav.load_failed');
      status.hidden = false;
      return;
    }
    if (mine !== generation) return;
    const conversations = page.conversations;
    list.replaceChildren(...conversations.map(conversationItem));
    nextBefore = page.next_before ?? null;
    older.hidden = !nextBefore;
    status.hidden = conversations.length > 0;
    if (conversations.length === 0) bindText(status, 'nav.empty');
    markActive();
  };

  const loadOlder = async () => {
    if (!nextBefore) return;
    const mine = generation;
    older.disabled = true;
    try {
      const page = await api.listConversations(nextBefore);
      if (mine !== generation) return;
      list.append(...page.conversations.map(conversationItem));
      nextBefore = page.next_before ?? null;
      older.hidden = !nextBefore;
      markActive();
    } catch (error) {
      if (mine !== generation) return;
      bindText(status, 'nav.load_failed');
      status.hidden = false;
    } finally {
      older.disabled = false;
    }
  };

  const setActive = (id) => {
    activeId = id;
    markActive();
  };

  const setDiagnosticsActive = (on) => {
    if (on) diagnostics.setAttribute('aria-current', 'page');
    else diagnostics.removeAttribute('aria-current');
  };

  const setScreenActive = (active) => {
    for (const [name, link] of screenLinks) {
      if (name === active) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  };

  return { element, refresh, setActive, setDiagnosticsActive, setScreenActive };
}

function conversationItem(conversation) {
  const title = h('span', { className: 'conversation-title' });
  if (conversation.title && conversation.title.trim()) title.textContent = conversation.title;
  else bindText(title, 'nav.untitled');
  const time = bindTime(h('time', { className: 'conversation-time' }), conversation.updated_at ?? conversation.created_at);
  const link = h('a', {
    className: 'conversation-link',
    href: `#/c/${encodeURIComponent(conversation.id)}`,
    testid: 'conversation-item',
    data: { conversationId: conversation.id },
  }, title, time);
  return h('li', {}, link);
}
