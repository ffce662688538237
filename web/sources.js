// The live data sources panel in the Diagnostics view, for admins: each source of the
// server's registry with its kind, the source kinds it answers, the services it is read
// for and its health, checked when the view opens (a PostgreSQL source must refuse a
// write). Every value reaches the DOM as text.

import * as api from './api.js';
import { text } from './diagnostics-report.js';
import { h } from './dom.js';
import { bindText } from './i18n.js';

/** The sources section for `user`, or null for a role that cannot see it. */
export function sourcesSection(user, isCurrent) {
  if (user.role !== 'admin') return null;
  const list = h('ul', { className: 'diag-approvals', testid: 'diag-sources' });
  const status = bindText(h('p', { className: 'diag-note', testid: 'diag-sources-status' }), 'sources.loading');
  const section = h('section', { className: 'diag-section', testid: 'diag-sources-section' },
    bindText(h('h2', { className: 'diag-section-title' }), 'sources.title'),
    bindText(h('p', { className: 'diag-note' }), 'sources.intro'),
    status, list);
  load(list, status, isCurrent);
  return section;
}

async function load(list, status, isCurrent) {
  let found;
  try {
    found = await api.listSources();
  } catch (error) {
    if (!isCurrent()) return;
    if (error instanceof api.ApiError && error.status === 0) bindText(status, 'error.network');
    else bindText(status, 'sources.failed');
    return;
  }
  if (!isCurrent()) return;
  list.replaceChildren(...found.sources.map(sourceItem));
  status.hidden = found.sources.length > 0;
  if (found.sources.length === 0) bindText(status, 'sources.none');
}

function sourceItem(source) {
  const healthy = source.ok === true;
  const services = Array.isArray(source.services) && source.services.length > 0
    ? h('span', { text: source.services.map(text).join(', ') })
    : bindText(h('span'), 'sources.all_services');
  const provides = Array.isArray(source.provides) ? source.provides.map(text).join(', ') : '';
  return h('li', { className: 'diag-approval', testid: 'source-item' },
    h('div', { className: 'diag-task-head' },
      h('strong', { text: text(source.name) }),
      h('code', { text: text(source.kind) }),
      bindText(h('span', { className: healthy ? 'badge badge-ok' : 'badge badge-error', testid: 'source-health' }),
        healthy ? 'sources.ok' : 'sources.down')),
    h('p', { className: 'diag-note', testid: 'source-detail', text: text(source.detail) }),
    h('dl', { className: 'facts' },
      fact('sources.provides', h('span', { text: provides })),
      fact('sources.services', services)));
}

function fact(key, value) {
  return h('div', { className: 'fact' }, bindText(h('dt'), key), h('dd', {}, value));
}
