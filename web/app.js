// The entry point of Warden's web UI. It owns start-up, which screen is shown (first
// administrator, sign-in, or the signed-in shell), the top bar (user, language, sign-out),
// and hash routing: `#/c/<id>` opens a conversation, `#/diagnostics` the diagnostic tasks and
// `#/diagnostics/<id>` one of them, `#/knowledge` the knowledge bases, `#/tokens` the API
// tokens, `#/users` and `#/audit` the admin screens, anything else the new-chat state.

import * as api from './api.js';
import { bootstrapScreen, loginScreen } from './auth.js';
import { createChatView } from './chat.js';
import { createDiagnosticsView } from './diagnostics.js';
import { h } from './dom.js';
import { bindAttr, bindText, language, setLanguage, t } from './i18n.js';
import { createAuditView } from './audit.js';
import { createKnowledgeView } from './knowledge.js';
import { closePassage } from './passage.js';
import { createSidebar } from './sidebar.js';
import { createTokensView } from './tokens.js';
import { createUsersView } from './users.js';

const root = document.getElementById('app');
const CONVERSATION_ROUTE = /^#\/c\/([^/?#]+)$/;
const DIAGNOSTICS_ROUTE = /^#\/diagnostics(?:\/([^/?#]+))?$/;
/** Screens reached by `#/<name>`; `admin` ones are linked for admins only. */
const SCREENS = [
  { name: 'knowledge', create: createKnowledgeView, admin: false },
  { name: 'tokens', create: createTokensView, admin: false },
  { name: 'users', create: createUsersView, admin: true },
  { name: 'audit', create: createAuditView, admin: true },
];
const SCREEN_ROUTE = /^#\/(knowledge|tokens|users|audit)$/;
const BOOTSTRAP_ROUTE = /^#bootstrap=([^&]+)/;
/** Widths at or below this show the conversation list as an overlay (keep in sync with style.css). */
const NARROW_LAYOUT = window.matchMedia('(max-width: 760px)');

/** The signed-in state: {user, sidebar, chat, diagnostics, screens, shell}, or null while signed out. */
let session = null;

start().catch((error) => {
  root.replaceChildren(h('p', { className: 'fatal', text: t('error.generic', { message: String(error) }) }));
});

async function start() {
  api.onUnauthorized(() => signOut('error.session_ended'));
  window.addEventListener('hashchange', route);
  const token = bootstrapToken();
  if (token !== null) {
    showBootstrap(token);
    return;
  }
  let user;
  try {
    user = await api.currentUser();
  } catch (error) {
    showLogin(error instanceof api.ApiError && error.status === 0 ? 'error.network' : null);
    return;
  }
  if (user) signIn(user);
  else showLogin();
}

function bootstrapToken() {
  const match = BOOTSTRAP_ROUTE.exec(window.location.hash);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

function clearHash() {
  window.history.replaceState(null, '', window.location.pathname + window.location.search);
}

function showBootstrap(token) {
  root.replaceChildren(bootstrapScreen({
    token,
    languageToggle: languageToggle(),
    onSignedIn: (user) => {
      clearHash();
      signIn(user);
    },
    onGoToLogin: () => {
      clearHash();
      showLogin();
    },
  }));
}

function showLogin(noticeKey = null) {
  root.replaceChildren(loginScreen({ onSignedIn: signIn, languageToggle: languageToggle(), notice: noticeKey }));
}

function signIn(user) {
  endSession();
  const sidebar = createSidebar({ onNewChat: startNewChat, onNavigate: () => setMenuOpen(false), isAdmin: user.role === 'admin' });
  const chat = createChatView({ onActivity: () => sidebar.refresh() });
  const diagnostics = createDiagnosticsView({ user });
  const screens = new Map(SCREENS.filter((screen) => !screen.admin || user.role === 'admin')
    .map((screen) => [screen.name, screen.create({ user })]));
  const backdrop = h('div', { className: 'sidebar-backdrop', on: { click: () => setMenuOpen(false) } });
  const shell = h('div', { className: 'shell' },
    topBar(user),
    h('div', { className: 'layout' }, sidebar.element, backdrop, chat.element, diagnostics.element,
      [...screens.values()].map((screen) => screen.element)));
  session = { user, sidebar, chat, diagnostics, screens, shell };
  root.replaceChildren(shell);
  sidebar.refresh();
  route();
}

function signOut(noticeKey = null) {
  if (session === null) return;
  endSession();
  showLogin(noticeKey);
}

function endSession() {
  session?.chat.dispose();
  session?.diagnostics.dispose();
  for (const screen of session?.screens.values() ?? []) screen.dispose();
  closePassage();
  session = null;
}

function route() {
  if (session === null) return;
  if (bootstrapToken() !== null) {
    clearHash(); // Already signed in: the setup link has nothing left to do.
  }
  setMenuOpen(false);
  const diagnostics = DIAGNOSTICS_ROUTE.exec(window.location.hash);
  const screenMatch = SCREEN_ROUTE.exec(window.location.hash);
  // An admin screen named by a non-admin shows the new-chat state.
  const screenName = screenMatch && session.screens.has(screenMatch[1]) ? screenMatch[1] : null;
  session.sidebar.setDiagnosticsActive(diagnostics !== null);
  session.sidebar.setScreenActive(screenName);
  session.chat.element.hidden = diagnostics !== null || screenName !== null;
  for (const [name, screen] of session.screens) {
    if (name !== screenName && !screen.element.hidden) screen.hide();
  }
  if (screenName) {
    session.sidebar.setActive(null);
    session.diagnostics.hide();
    session.screens.get(screenName).show();
    return;
  }
  if (diagnostics) {
    session.sidebar.setActive(null);
    session.diagnostics.show(diagnostics[1] === undefined ? null : routeId(diagnostics[1]));
    return;
  }
  session.diagnostics.hide();
  const match = CONVERSATION_ROUTE.exec(window.location.hash);
  const id = match ? routeId(match[1]) : null;
  session.sidebar.setActive(id);
  if (session.chat.conversationId !== id || id === null) session.chat.show(id);
}

function routeId(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function startNewChat() {
  setMenuOpen(false);
  if (window.location.hash === '#/' && session) session.chat.show(null);
  else window.location.hash = '#/';
  session?.chat.focusComposer();
}

function topBar(user) {
  const menuButton = h('button', {
    type: 'button',
    className: 'icon-button menu-button',
    attrs: { 'aria-controls': 'sidebar', 'aria-expanded': 'false' },
    on: { click: () => setMenuOpen(!document.body.classList.contains('menu-open')) },
  }, h('span', { className: 'menu-icon', attrs: { 'aria-hidden': 'true' } }));
  bindAttr(menuButton, 'aria-label', 'header.menu');
  const logout = bindText(h('button', { type: 'button', className: 'button button-quiet', testid: 'logout' }), 'header.logout');
  logout.addEventListener('click', async () => {
    logout.disabled = true;
    try {
      await api.logout();
    } catch {
      // Signed out locally either way; the server forgets the session when it expires.
    }
    endSession();
    window.history.replaceState(null, '', window.location.pathname);
    showLogin();
  });
  const role = bindText(h('span', { className: `role-badge role-${user.role}`, testid: 'user-role' }), `role.${user.role}`);
  const who = h('span', { className: 'user-chip', testid: 'user' },
    h('span', { className: 'user-avatar', text: [...(user.name || '?')][0].toUpperCase(), attrs: { 'aria-hidden': 'true' } }),
    h('span', { className: 'user-name', text: user.name }),
    role);
  return h('header', { className: 'topbar' },
    menuButton,
    h('a', { className: 'brand', href: '#/' },
      h('span', { className: 'brand-mark', attrs: { 'aria-hidden': 'true' } }),
      h('span', { className: 'brand-name', text: 'Warden' })),
    h('div', { className: 'topbar-actions' }, who, languageToggle(), logout));
}

function setMenuOpen(open) {
  const shouldOpen = open && NARROW_LAYOUT.matches;
  document.body.classList.toggle('menu-open', shouldOpen);
  document.querySelector('.menu-button')?.setAttribute('aria-expanded', String(shouldOpen));
}

function languageToggle() {
  const button = h('button', { type: 'button', className: 'button button-quiet lang-toggle', testid: 'lang-toggle' });
  bindText(button, 'lang.toggle');
  bindAttr(button, 'aria-label', 'lang.toggle_label');
  button.addEventListener('click', () => setLanguage(language() === 'en' ? 'zh' : 'en', document.body));
  return button;
}
