// One knowledge base's sync, live: a progress bar with files done of total, chunks indexed,
// the rate and an estimated time left (computed here from the progress events' counts and
// the time between them), a Cancel button while it runs, and the final report — added,
// updated, unchanged and deleted files, and the skipped and failed files with their
// reasons. The events come from `POST /api/kb/{name}/sync` (`progress`, then `completed`
// or `failed`); leaving the page stops listening, not the sync.

import * as api from './api.js';
import { button, errorLine, hideError, showError, text } from './admin-common.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, t } from './i18n.js';

/** The rate needs this long of progress before an estimate is shown. */
const MIN_SECONDS_FOR_ESTIMATE = 0.5;
/** Lists of skipped and failed files show this many rows; the rest are counted. */
const MAX_LISTED_FILES = 50;

/**
 * Creates the sync panel of knowledge base `name`. `onFinished(outcome)` is called when the
 * sync ends ('completed', 'failed', 'cancelled'). Returns {element, start(), stop(), running()}.
 */
export function createSyncPanel(name, { onFinished = () => {} } = {}) {
  return new SyncPanel(name, onFinished);
}

class SyncPanel {
  constructor(name, onFinished) {
    this.name = name;
    this.onFinished = onFinished;
    this.abort = null;
    this.cancelRequested = false;
    this.stats = null;
    const labelId = uniqueId('sync-label');
    this.label = bindText(h('span', { className: 'sync-label', id: labelId, testid: 'sync-label' }), 'sync.starting', { name });
    this.bar = h('progress', { className: 'sync-bar', testid: 'sync-bar', attrs: { 'aria-labelledby': labelId } });
    this.numbers = h('p', { className: 'sync-numbers', testid: 'sync-numbers', attrs: { 'aria-live': 'polite' } });
    this.file = h('p', { className: 'sync-file admin-muted', testid: 'sync-file' });
    this.cancel = button('sync.cancel', { testid: 'sync-cancel', className: 'button button-small button-danger' });
    this.cancel.addEventListener('click', () => this.requestCancel());
    this.error = errorLine('sync-error');
    this.report = h('div', { className: 'sync-report', testid: 'sync-report', hidden: true });
    this.element = h('div', { className: 'sync-panel', testid: 'sync-panel', data: { kb: name } },
      h('div', { className: 'sync-head' }, this.label, this.cancel),
      this.bar, this.numbers, this.file, this.error, this.report);
  }

  running() {
    return this.abort !== null;
  }

  /** Starts the sync and follows it until it ends. */
  async start() {
    if (this.running()) return;
    this.abort = new AbortController();
    this.cancelRequested = false;
    this.stats = { started: performance.now(), indexingFrom: null, filesDone: 0, filesTotal: null, chunks: 0 };
    this.element.dataset.state = 'running';
    this.cancel.hidden = false;
    this.cancel.disabled = false;
    this.report.hidden = true;
    hideError(this.error);
    this.bar.removeAttribute('value');
    bindText(this.label, 'sync.starting', { name: this.name });
    let outcome = null;
    try {
      await api.syncKnowledgeBase(this.name, {
        signal: this.abort.signal,
        onEvent: (event) => {
          const ended = this.apply(event);
          if (ended) outcome = ended;
        },
      });
    } catch (error) {
      outcome = 'refused';
      showError(this.error, error);
      bindText(this.label, 'sync.refused', { name: this.name });
    }
    const stopped = this.abort?.signal.aborted ?? false;
    this.abort = null;
    this.cancel.hidden = true;
    if (stopped) return;
    if (outcome === null) {
      outcome = 'lost';
      bindText(this.label, 'sync.lost', { name: this.name });
    }
    this.element.dataset.state = outcome;
    this.onFinished(outcome);
  }

  /** Stops listening (the page is closing); the server's sync goes on. */
  stop() {
    this.abort?.abort();
  }

  async requestCancel() {
    this.cancel.disabled = true;
    this.cancelRequested = true;
    bindText(this.label, 'sync.cancelling', { name: this.name });
    try {
      await api.cancelKnowledgeBaseSync(this.name);
    } catch (error) {
      this.cancelRequested = false;
      this.cancel.disabled = false;
      showError(this.error, error);
    }
  }

  /** Applies one event; returns the outcome when the sync ended, else null. */
  apply(event) {
    const data = event.data && typeof event.data === 'object' ? event.data : {};
    switch (event.type) {
      case 'progress':
        this.progress(data);
        return null;
      case 'completed':
        this.completed(data);
        return 'completed';
      case 'cancelled':
        this.cancelled();
        return 'cancelled';
      case 'failed':
        if (this.cancelRequested || /cancel/i.test(text(data.error))) {
          this.cancelled();
          return 'cancelled';
        }
        bindText(this.label, 'sync.failed', { name: this.name });
        this.error.hidden = false;
        bindText(this.error, 'sync.failed_reason', { reason: text(data.error) || '?' });
        return 'failed';
      default:
        return null;
    }
  }

  progress(data) {
    const stats = this.stats;
    const now = performance.now();
    if (data.stage === 'scanned') {
      // Indexing starts once the folder is scanned: rates count from here.
      stats.indexingFrom = now;
      stats.filesTotal = Number(data.to_index) || 0;
      bindText(this.label, 'sync.scanned', {
        name: this.name, files: num(data.files), to_index: num(data.to_index), unchanged: num(data.unchanged), to_delete: num(data.to_delete),
      });
    } else {
      stats.filesDone = Number(data.files_done) || 0;
      stats.filesTotal = Number(data.files_total) || stats.filesTotal || 0;
      stats.chunks = Number(data.chunks) || 0;
      if (stats.indexingFrom === null) stats.indexingFrom = stats.started;
      bindText(this.label, data.stage === 'committed' ? 'sync.committing' : 'sync.indexing', { name: this.name });
      this.file.textContent = text(data.path);
    }
    const total = stats.filesTotal ?? 0;
    if (total > 0) {
      this.bar.max = total;
      this.bar.value = Math.min(stats.filesDone, total);
    }
    const seconds = stats.indexingFrom === null ? 0 : (now - stats.indexingFrom) / 1000;
    const rate = seconds > 0 ? stats.chunks / seconds : 0;
    const filesPerSecond = seconds > 0 ? stats.filesDone / seconds : 0;
    const left = Math.max(0, total - stats.filesDone);
    const eta = seconds >= MIN_SECONDS_FOR_ESTIMATE && filesPerSecond > 0 ? left / filesPerSecond : null;
    this.element.dataset.filesDone = String(stats.filesDone);
    this.element.dataset.filesTotal = String(total);
    bindText(this.numbers, eta === null ? 'sync.numbers' : 'sync.numbers_eta', {
      done: stats.filesDone, total, chunks: stats.chunks, rate: rate.toFixed(1), eta: duration(eta),
    });
  }

  completed(report) {
    bindText(this.label, 'sync.completed', { name: this.name });
    if (this.bar.max > 0) this.bar.value = this.bar.max;
    else {
      this.bar.max = 1;
      this.bar.value = 1;
    }
    this.file.textContent = '';
    this.report.replaceChildren(renderReport(report));
    this.report.hidden = false;
  }

  cancelled() {
    bindText(this.label, 'sync.cancelled', { name: this.name });
    this.file.textContent = '';
  }
}

/** The report of a completed sync: counts, then the skipped and failed files with reasons. */
export function renderReport(report) {
  const counts = ['added', 'updated', 'unchanged', 'deleted', 'chunks_indexed'].map((key) =>
    h('div', { className: 'fact', data: { count: key } },
      bindText(h('dt'), `sync.report.${key}`),
      h('dd', { testid: `sync-count-${key}`, text: num(report[key]) })));
  const seconds = Number(report.seconds);
  const timing = Number.isFinite(seconds)
    ? bindText(h('p', { className: 'admin-muted sync-timing' }), 'sync.report.timing', {
      seconds: seconds.toFixed(1), rate: (Number(report.chunks_per_second) || 0).toFixed(1),
    })
    : null;
  return h('div', { className: 'sync-report-body' },
    bindText(h('h3', { className: 'sync-report-title' }), 'sync.report.title'),
    h('dl', { className: 'facts sync-counts' }, counts),
    timing,
    fileList('sync.report.skipped', report.skipped, 'reason', 'sync-skipped'),
    fileList('sync.report.failed', report.failed, 'error', 'sync-failed'));
}

function fileList(titleKey, items, reasonField, testid) {
  const list = Array.isArray(items) ? items.filter((item) => item && typeof item === 'object') : [];
  const heading = bindText(h('h4', { className: 'sync-list-title' }), titleKey, { count: list.length });
  if (list.length === 0) return h('div', { className: 'sync-list', testid }, heading);
  const rows = list.slice(0, MAX_LISTED_FILES).map((item) => h('li', { testid: `${testid}-item` },
    h('code', { className: 'sync-path', text: text(item.path) }),
    h('span', { className: 'sync-reason', text: text(item[reasonField]) })));
  const more = list.length > MAX_LISTED_FILES
    ? bindText(h('li', { className: 'admin-muted' }), 'sync.report.more', { count: list.length - MAX_LISTED_FILES })
    : null;
  const element = h('div', { className: `sync-list sync-list-${reasonField}`, testid }, heading, h('ul', {}, rows, more));
  bindAttr(element, 'aria-label', titleKey, { count: list.length });
  return element;
}

function num(value) {
  const number = Number(value);
  return Number.isFinite(number) ? String(number) : '0';
}

/** "12 s", "3 min 5 s" (in the current language), or "—" when unknown. */
function duration(seconds) {
  if (seconds === null || !Number.isFinite(seconds)) return '—';
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) return t('sync.seconds', { s: whole });
  return t('sync.minutes', { m: Math.floor(whole / 60), s: whole % 60 });
}
