// The Diagnostics view: the signed-in user's diagnostic tasks, starting one on an incident
// (operators and admins; viewers see why they cannot), and one task's page — its progress,
// live while the graph runs, and its report once it completed. A task's progress comes from
// its run's event stream, replayed from the start whenever the page opens (after a reload
// too) and de-duplicated by sequence number and by step, so no step is drawn twice. Routes:
// `#/diagnostics` and `#/diagnostics/<id>`; app.js decides when the view is shown. Operators
// and admins also see the recovery approval queue (approvals.js); admins see the live data
// sources and their health (sources.js).

import * as api from './api.js';
import { approvalsSection } from './approvals.js';
import { sourcesSection } from './sources.js';
import { token } from './cards.js';
import { createProgress, noProgress } from './diagnostics-progress.js';
import { labelled, renderReport, text } from './diagnostics-report.js';
import { h, uniqueId } from './dom.js';
import { bindText, bindTime } from './i18n.js';
import { followRun } from './stream.js';

const ROLES_THAT_START = new Set(['operator', 'admin']);
const FINISHED_STATUSES = new Set(['completed', 'failed', 'cancelled']);
/** A completed run's report may be stored a moment after its last event: ask this often. */
const REPORT_ATTEMPTS = 6;
const REPORT_RETRY_MS = 500;

/** Creates the view for the signed-in `user`. Returns {element, show(taskId | null), hide(), dispose()}. */
export function createDiagnosticsView({ user }) {
  return new DiagnosticsView(user);
}

class DiagnosticsView {
  constructor(user) {
    this.user = user;
    this.generation = 0;
    this.stream = null;
    this.page = h('div', { className: 'diag-page' });
    this.element = h('main', { className: 'diagnostics', testid: 'diagnostics', hidden: true }, this.page);
  }

  /** Shows the task list (null) or one task's page. */
  show(taskId) {
    this.reset();
    this.element.hidden = false;
    this.element.scrollTop = 0;
    if (taskId === null) this.showList(this.generation);
    else this.showTask(taskId, this.generation);
  }

  /** Hides the view and stops following any run. */
  hide() {
    this.reset();
    this.element.hidden = true;
  }

  dispose() {
    this.reset();
  }

  reset() {
    this.generation += 1;
    this.stream?.close();
    this.stream = null;
  }

  // --- The list and the start form ---------------------------------------------------------------

  async showList(mine) {
    const tasks = h('ul', { className: 'diag-tasks', testid: 'diag-tasks' });
    const status = bindText(h('p', { className: 'diag-note', testid: 'diag-tasks-status' }), 'diag.list.loading');
    this.page.replaceChildren(
      h('header', { className: 'diag-header' },
        bindText(h('h1', { className: 'diag-title' }), 'diag.title'),
        bindText(h('p', { className: 'diag-intro' }), 'diag.intro')),
      this.startForm(mine),
      ...[approvalsSection(this.user, () => mine === this.generation),
        sourcesSection(this.user, () => mine === this.generation)].filter(Boolean),
      h('section', { className: 'diag-section diag-list', testid: 'diag-list' },
        bindText(h('h2', { className: 'diag-section-title' }), 'diag.list.title'), status, tasks));
    let loaded;
    try {
      loaded = await api.listDiagnostics();
    } catch (error) {
      if (mine === this.generation) showError(status, error, 'diag.list.failed');
      return;
    }
    if (mine !== this.generation) return;
    tasks.replaceChildren(...loaded.map(taskItem));
    status.hidden = loaded.length > 0;
    if (loaded.length === 0) bindText(status, 'diag.list.empty');
  }

  startForm(mine) {
    const allowed = ROLES_THAT_START.has(this.user.role);
    const selectId = uniqueId('diag-incident');
    const select = h('select', { id: selectId, className: 'field-input diag-select', testid: 'diag-incident', disabled: true });
    const button = bindText(h('button', { type: 'submit', className: 'button button-primary', testid: 'diag-start', disabled: true }), 'diag.start.button');
    const note = h('p', { className: 'diag-note', id: uniqueId('diag-note'), testid: 'diag-start-note', hidden: allowed });
    const error = h('p', { className: 'form-error', testid: 'diag-start-error', hidden: true, attrs: { role: 'alert' } });
    if (!allowed) {
      bindText(note, 'diag.start.viewer');
      button.setAttribute('aria-describedby', note.id);
    }
    const form = h('form', { className: 'diag-section diag-start', testid: 'diag-start-form' },
      bindText(h('h2', { className: 'diag-section-title' }), 'diag.start.title'),
      bindText(h('label', { className: 'field-label', htmlFor: selectId }), 'diag.start.incident'),
      h('div', { className: 'diag-start-row' }, select, button),
      note, error);
    let busy = false;
    const ready = () => {
      button.disabled = busy || !allowed || select.options.length === 0;
      select.disabled = busy || !allowed || select.options.length === 0;
    };
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      if (busy || !select.value) return;
      busy = true;
      ready();
      error.hidden = true;
      bindText(button, 'diag.start.busy');
      try {
        const started = await api.startDiagnostic(select.value);
        if (mine !== this.generation) return;
        window.location.hash = `#/diagnostics/${encodeURIComponent(started.diagnostic_task_id)}`;
      } catch (failure) {
        if (mine !== this.generation) return;
        showStartError(error, failure);
      } finally {
        busy = false;
        bindText(button, 'diag.start.button');
        ready();
      }
    });
    this.loadIncidents(select, note, ready, mine);
    return form;
  }

  async loadIncidents(select, note, ready, mine) {
    let incidents;
    try {
      incidents = await api.listIncidents();
    } catch (error) {
      if (mine !== this.generation) return;
      note.hidden = false;
      showError(note, error, 'diag.start.incidents_failed');
      return;
    }
    if (mine !== this.generation) return;
    select.replaceChildren(...incidents.map((incident) => h('option', {
      value: text(incident.id),
      text: [text(incident.id), text(incident.title)].filter(Boolean).join(' — ') + (text(incident.status) ? ` (${text(incident.status)})` : ''),
    })));
    const firing = incidents.find((incident) => incident.status === 'firing' || incident.status === 'open');
    if (firing) select.value = text(firing.id);
    if (incidents.length === 0 && ROLES_THAT_START.has(this.user.role)) {
      note.hidden = false;
      bindText(note, 'diag.start.no_incidents');
    }
    ready();
  }

  // --- One task ---------------------------------------------------------------------------------

  async showTask(taskId, mine) {
    const back = h('a', { className: 'diag-back', href: '#/diagnostics', testid: 'diag-back' },
      h('span', { attrs: { 'aria-hidden': 'true' }, text: '← ' }), bindText(h('span'), 'diag.back'));
    const loading = bindText(h('p', { className: 'diag-note', testid: 'diag-task-status' }), 'diag.task.loading');
    this.page.replaceChildren(back, loading);
    let task;
    try {
      task = await api.getDiagnostic(taskId);
    } catch (error) {
      if (mine !== this.generation) return;
      loading.setAttribute('role', 'alert');
      if (error instanceof api.ApiError && error.status === 404) bindText(loading, 'diag.task.not_found');
      else showError(loading, error, 'diag.task.failed');
      return;
    }
    if (mine !== this.generation) return;
    this.renderTask(back, task, mine);
  }

  renderTask(back, task, mine) {
    const badge = h('span', { className: 'badge badge-status', testid: 'diag-status' });
    const runStatus = h('p', { className: 'run-status diag-run-status', testid: 'diag-run-status', attrs: { role: 'status' } });
    const progress = createProgress();
    const reportBox = h('div', { className: 'diag-report-box', testid: 'diag-report-box', hidden: true });
    const live = { task, badge, runStatus, progress, reportBox, mine, finished: false, reportShown: false, readingReport: false };
    this.page.replaceChildren(back,
      h('header', { className: 'diag-header', testid: 'diag-task', data: { taskId: text(task.id) } },
        h('h1', { className: 'diag-title' }, bindText(h('span'), 'diag.task.title'), ' ', h('code', { className: 'diag-task-code', text: text(task.id) }), ' ', badge),
        h('dl', { className: 'facts diag-task-facts' },
          fact('diag.field.incident', h('code', { testid: 'diag-incident-id', text: text(task.incident_id) || '—' })),
          fact('diag.field.run', h('code', { text: text(task.run_id) || '—' })),
          fact('diag.field.graph_version', h('span', { text: text(task.graph_version) || '—' })),
          fact('diag.field.created', typeof task.created_at === 'number' ? bindTime(h('time'), task.created_at) : h('span', { text: '—' })))),
      runStatus, reportBox, progress.element);
    this.setTaskStatus(live, task.status);
    if (task.report) this.showReport(live, task.report);
    if (FINISHED_STATUSES.has(task.status)) this.finishStatus(live, task.status, task.failure_reason);
    else this.setRunStatus(live, statusKey(task.status));
    if (text(task.run_id)) this.follow(live, 0);
    else noProgress(progress);
  }

  follow(live, after) {
    this.stream = followRun(live.task.run_id, {
      after,
      onEvent: (event) => this.onRunEvent(live, event),
      onConnection: (state) => {
        if (live.finished || live.mine !== this.generation) return;
        this.setRunStatus(live, state === 'reconnecting' ? 'diag.run.reconnecting' : statusKey(live.task.status));
      },
      onLost: () => this.onStreamLost(live),
    });
  }

  onRunEvent(live, event) {
    if (live.mine !== this.generation) return;
    live.progress.apply(event);
    switch (event.type) {
      case 'run.started':
      case 'run.resumed':
      case 'diagnostic.node':
      case 'tool.started':
      case 'tool.completed':
        if (!live.finished && live.task.status !== 'running') this.setTaskStatus(live, 'running');
        if (!live.finished) this.setRunStatus(live, 'diag.run.running');
        break;
      case 'run.completed':
        this.finish(live, 'completed');
        break;
      case 'run.failed':
        this.finish(live, 'failed', event.data.reason);
        break;
      case 'run.cancelled':
        this.finish(live, 'cancelled');
        break;
      default:
        break;
    }
  }

  /** The run ended: say how, and draw the report (the stored one, read once it is there). */
  async finish(live, outcome, reason) {
    if (!live.finished) this.setTaskStatus(live, outcome);
    this.finishStatus(live, outcome, reason);
    if (live.reportShown || live.readingReport) return;
    live.readingReport = true;
    for (let attempt = 0; attempt < REPORT_ATTEMPTS; attempt += 1) {
      let task = null;
      try {
        task = await api.getDiagnostic(live.task.id);
      } catch {
        task = null;
      }
      if (live.mine !== this.generation || live.reportShown) return;
      if (task) this.setTaskStatus(live, task.status);
      if (task?.report) {
        this.showReport(live, task.report);
        return;
      }
      if (task && outcome !== 'completed') return; // A failed or cancelled run may leave no report.
      await new Promise((resolve) => setTimeout(resolve, REPORT_RETRY_MS));
      if (live.mine !== this.generation) return;
    }
    live.reportBox.replaceChildren(bindText(h('p', { className: 'diag-note', testid: 'diag-report-missing' }), 'diag.report.unavailable'));
    live.reportBox.hidden = false;
  }

  async onStreamLost(live) {
    if (live.mine !== this.generation || live.finished) return;
    let task = null;
    try {
      task = await api.getDiagnostic(live.task.id);
    } catch {
      task = null;
    }
    if (live.mine !== this.generation || live.finished) return;
    if (task && FINISHED_STATUSES.has(task.status)) {
      // It ended while we could not listen: show what was stored.
      live.task = task;
      this.finish(live, task.status, task.failure_reason);
      return;
    }
    this.setRunStatus(live, 'diag.run.stream_lost');
    live.runStatus.dataset.status = 'error';
    const retry = bindText(h('button', { type: 'button', className: 'button button-small', testid: 'diag-retry' }), 'run.retry');
    retry.addEventListener('click', () => {
      retry.remove();
      delete live.runStatus.dataset.status;
      this.setRunStatus(live, 'diag.run.reconnecting');
      this.follow(live, this.stream?.lastSeq() ?? 0);
    });
    live.runStatus.append(' ', retry);
  }

  showReport(live, report) {
    live.reportShown = true;
    live.reportBox.replaceChildren(renderReport(report));
    live.reportBox.hidden = false;
  }

  finishStatus(live, outcome, reason) {
    live.finished = true;
    live.runStatus.dataset.outcome = token(outcome);
    if (outcome === 'failed') bindText(live.runStatus, text(reason) ? 'diag.run.failed' : 'diag.run.failed_unknown', { reason: text(reason) });
    else bindText(live.runStatus, statusKey(outcome));
  }

  setRunStatus(live, key) {
    bindText(live.runStatus, key);
  }

  setTaskStatus(live, status) {
    live.task = { ...live.task, status };
    live.badge.dataset.value = token(status);
    labelled(live.badge, 'diag.status', status);
  }
}

function taskItem(task) {
  const time = typeof task.created_at === 'number' ? bindTime(h('time', { className: 'diag-task-time' }), task.created_at) : null;
  const verdict = text(task.verdict)
    ? labelled(h('span', { className: 'badge diag-verdict-badge', data: { value: token(task.verdict) } }), 'diag.verdict', task.verdict)
    : null;
  const link = h('a', {
    className: 'diag-task-link',
    href: `#/diagnostics/${encodeURIComponent(text(task.id))}`,
    testid: 'diag-task-item',
    data: { taskId: text(task.id), status: token(task.status) },
  },
  h('span', { className: 'diag-task-head' },
    h('code', { className: 'diag-task-incident', text: text(task.incident_id) }),
    labelled(h('span', { className: 'badge badge-status', data: { value: token(task.status) } }), 'diag.status', task.status),
    verdict,
    time),
  h('span', { className: 'diag-task-mechanism', text: text(task.mechanism) }),
  h('code', { className: 'diag-task-code', text: text(task.id) }));
  return h('li', {}, link);
}

function fact(key, value) {
  return h('div', { className: 'fact' }, bindText(h('dt'), key), h('dd', {}, value));
}

/** The status line's key for a task status. */
function statusKey(status) {
  switch (status) {
    case 'queued':
      return 'diag.run.queued';
    case 'waiting_for_graph':
      return 'diag.run.waiting';
    case 'completed':
      return 'diag.run.completed';
    case 'cancelled':
      return 'diag.run.cancelled';
    case 'failed':
      return 'diag.run.failed_unknown';
    default:
      return 'diag.run.running';
  }
}

function showStartError(element, error) {
  element.hidden = false;
  if (!(error instanceof api.ApiError)) bindText(element, 'error.generic', { message: String(error) });
  else if (error.status === 0) bindText(element, 'error.network');
  else if (error.status === 403) bindText(element, 'diag.start.forbidden');
  else if (error.status === 404) bindText(element, 'diag.start.incident_missing');
  else if (error.status === 400) bindText(element, 'diag.start.bad_incident', { message: error.message });
  else bindText(element, 'error.generic', { message: error.message });
}

function showError(element, error, fallbackKey) {
  if (error instanceof api.ApiError && error.status === 0) bindText(element, 'error.network');
  else bindText(element, fallbackKey);
}
