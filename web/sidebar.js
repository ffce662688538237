// The conversation list on the left: a "New chat" button and the user's conversations,
// newest first, each a link to its `#/c/<id>` route. It owns fetching and drawing that list
// and marking the open conversation; routing itself belongs to app.js.

import * as api from './api.js';
import { h } from './dom.js';
import { bindText, bindTime } from './i18n.js';

/**
 * Creates the sidebar. `onNavigate` is told when a conversation link is followed (even the
 * open one, which changes no route). Returns {element, refresh(), setActive(id)}.
 */
export function createSidebar({ onNewChat, onNavigate = () => {} }) {
  const newChat = h('button', { type: 'button', className: 'button button-primary new-chat', testid: 'new-chat', on: { click: onNewChat } },
    h('span', { className: 'new-chat-plus', text: '+', attrs: { 'aria-hidden': 'true' } }),
    bindText(h('span'), 'nav.new_chat'));
  const heading = bindText(h('h2', { className: 'sidebar-heading', id: 'sidebar-heading' }), 'nav.heading');
  const list = h('ul', { className: 'conversation-list' });
  list.addEventListener('click', (event) => {
    if (event.target.closest('a')) onNavigate();
  });
  const status = h('p', { className: 'sidebar-status', hidden: true });
  const element = h('aside', { className: 'sidebar', id: 'sidebar' },
    newChat,
    h('nav', { className: 'sidebar-nav', attrs: { 'aria-labelledby': 'sidebar-heading' } }, heading, list, status));
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
    let conversations;
    try {
      conversations = await api.listConversations();
    } catch (error) {
      if (mine !== generation) return;
      if (error instanceof api.ApiError && error.status === 401) return;
      bindText(status, 'nav.load_failed');
      status.hidden = false;
      return;
    }
    if (mine !== generation) return;
    list.replaceChildren(...conversations.map(conversationItem));
    status.hidden = conversations.length > 0;
    if (conversations.length === 0) bindText(status, 'nav.empty');
    markActive();
  };

  const setActive = (id) => {
    activeId = id;
    markActive();
  };

  return { element, refresh, setActive };
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
