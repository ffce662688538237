// The Knowledge screen (`#/knowledge`), for every signed-in user: the knowledge bases the
// caller may read (documents, chunks, last sync, readers), and the search preview. Operators
// and admins may sync one (live progress, cancel, the report); admins also add a folder
// (name, path within the allowed roots, readers), edit a knowledge base's readers, and remove
// one after confirming. The server decides what each role may do; this screen only leaves
// out the controls a role cannot use.

import * as api from './api.js';
import {
  button, clearText, confirmingButton, dash, errorLine, field, hideError, parseReaderList, readerChips, screen, section,
  showError, statusLine, table, text, textInput,
} from './admin-common.js';
import { createSyncPanel } from './knowledge-sync.js';
import { createSearchPreview } from './knowledge-search.js';
import { h } from './dom.js';
import { bindText, bindTime } from './i18n.js';

const ROLES_THAT_SYNC = new Set(['operator', 'admin']);

/** Creates the screen for the signed-in `user`. Returns {element, show(), hide(), dispose()}. */
export function createKnowledgeView({ user }) {
  return new KnowledgeView(user);
}

class KnowledgeView {
  constructor(user) {
    this.user = user;
    this.isAdmin = user.role === 'admin';
    this.canSync = ROLES_THAT_SYNC.has(user.role);
    this.generation = 0;
    /** Sync panels by knowledge-base name; they outlive a redraw of the list. */
    this.syncs = new Map();
    /** The knowledge base whose readers are being edited, or null. */
    this.editing = null;
    this.bases = [];
    const { element, body } = screen({ testid: 'knowledge', titleKey: 'kb.title', introKey: 'kb.intro' });
    this.element = element;
    this.status = statusLine('kb-status');
    this.listError = errorLine('kb-list-error');
    this.tableBox = h('div', { className: 'kb-table-box' });
    this.search = createSearchPreview();
    body.append(
      section('kb.list.title', { testid: 'kb-list' }, this.status, this.listError, this.tableBox),
      this.isAdmin ? this.addForm() : null,
      this.search.element);
  }

  show() {
    this.element.hidden = false;
    this.refresh();
  }

  hide() {
    this.element.hidden = true;
  }

  dispose() {
    this.generation += 1;
    for (const panel of this.syncs.values()) panel.stop();
    this.syncs.clear();
  }

  async refresh() {
    this.generation += 1;
    const mine = this.generation;
    if (this.bases.length === 0) bindText(this.status, 'kb.list.loading');
    let bases;
    try {
      bases = await api.listKnowledgeBases();
    } catch (error) {
      if (mine !== this.generation) return;
      showError(this.listError, error);
      clearText(this.status);
      return;
    }
    if (mine !== this.generation) return;
    hideError(this.listError);
    this.bases = bases;
    this.search.setKnowledgeBases(bases.map((kb) => text(kb.name)));
    this.draw();
  }

  draw() {
    if (this.bases.length === 0) {
      bindText(this.status, this.isAdmin ? 'kb.list.empty_admin' : 'kb.list.empty');
      this.tableBox.replaceChildren();
      return;
    }
    // A message about a change stays; one about the list itself goes.
    if (['kb.list.loading', 'kb.list.empty', 'kb.list.empty_admin'].includes(this.status.dataset.i18n)) clearText(this.status);
    const columns = ['kb.col.name', 'kb.col.documents', 'kb.col.chunks', 'kb.col.synced', 'kb.col.readers'];
    if (this.isAdmin) columns.push('kb.col.root');
    if (this.canSync) columns.push('kb.col.actions');
    const rows = this.bases.flatMap((kb) => this.rows(kb, columns.length));
    this.tableBox.replaceChildren(table(columns, rows, { testid: 'kb-table', caption: 'kb.list.title' }));
  }

  /** A knowledge base's row, and under it a row for its sync panel or readers editor. */
  rows(kb, width) {
    const name = text(kb.name);
    const synced = typeof kb.synced_at === 'number' ? bindTime(h('time'), kb.synced_at) : bindText(h('span', { className: 'admin-muted' }), 'kb.never');
    const cells = [
      h('th', { attrs: { scope: 'row' } }, h('span', { className: 'kb-name', testid: 'kb-name', text: name })),
      h('td', { className: 'admin-number', testid: 'kb-documents', text: text(kb.documents) || '0' }),
      h('td', { className: 'admin-number', testid: 'kb-chunks', text: text(kb.chunks) || '0' }),
      h('td', { testid: 'kb-synced' }, synced),
      h('td', {}, readerChips(kb.readers)),
    ];
    if (this.isAdmin) cells.push(h('td', {}, text(kb.root) ? h('code', { className: 'kb-root', testid: 'kb-root', text: text(kb.root) }) : dash()));
    if (this.canSync) cells.push(h('td', { className: 'admin-actions' }, this.actions(kb)));
    const row = h('tr', { testid: 'kb-row', data: { kb: name } }, cells);
    const detail = [];
    const panel = this.syncs.get(name);
    if (panel) detail.push(panel.element);
    if (this.editing === name) detail.push(this.readersEditor(kb));
    if (detail.length === 0) return [row];
    return [row, h('tr', { className: 'kb-detail-row', testid: 'kb-detail', data: { kb: name } }, h('td', { attrs: { colspan: String(width) } }, detail))];
  }

  actions(kb) {
    const name = text(kb.name);
    const running = this.syncs.get(name)?.running() ?? false;
    const sync = button('kb.sync', { testid: 'kb-sync', onClick: () => this.startSync(name) });
    sync.disabled = running;
    if (!this.isAdmin) return [sync];
    const readers = button('kb.edit_readers', {
      testid: 'kb-edit-readers',
      onClick: () => {
        this.editing = this.editing === name ? null : name;
        this.draw();
        this.element.querySelector('[data-testid="kb-readers-input"]')?.focus();
      },
    });
    readers.setAttribute('aria-expanded', String(this.editing === name));
    const remove = confirmingButton({
      key: 'kb.remove',
      questionKey: 'kb.remove_question',
      questionParams: { name },
      confirmKey: 'kb.remove_confirm',
      testid: 'kb-remove',
      onConfirm: () => this.remove(name),
    });
    return [sync, readers, remove];
  }

  startSync(name) {
    let panel = this.syncs.get(name);
    if (panel?.running()) return;
    if (!panel) {
      panel = createSyncPanel(name, { onFinished: () => this.refreshAfterSync() });
      this.syncs.set(name, panel);
    }
    this.draw();
    panel.start();
    this.draw(); // The Sync button is disabled while it runs.
  }

  refreshAfterSync() {
    if (!this.element.isConnected) return;
    this.refresh();
  }

  async remove(name) {
    try {
      await api.removeKnowledgeBase(name);
    } catch (error) {
      showError(this.listError, error);
      return;
    }
    this.syncs.get(name)?.stop();
    this.syncs.delete(name);
    if (this.editing === name) this.editing = null;
    await this.refresh();
    bindText(this.status, 'kb.removed', { name });
  }

  readersEditor(kb) {
    const name = text(kb.name);
    const input = textInput({ testid: 'kb-readers-input' });
    input.value = (Array.isArray(kb.readers) ? kb.readers.map(text) : []).join(', ');
    const preview = h('div', { className: 'kb-readers-preview', testid: 'kb-readers-preview' });
    const error = errorLine('kb-readers-error');
    const save = button('admin.save', { testid: 'kb-readers-save', className: 'button button-small button-primary', type: 'submit' });
    const cancel = button('admin.cancel', { testid: 'kb-readers-cancel', className: 'button button-small button-quiet' });
    const update = () => {
      const parsed = parseReaderList(input.value);
      preview.replaceChildren(readerChips(parsed.readers));
      if (parsed.invalid.length > 0) {
        error.hidden = false;
        bindText(error, 'reader.invalid', { items: parsed.invalid.join(', ') });
      } else hideError(error);
      return parsed;
    };
    input.addEventListener('input', update);
    update();
    cancel.addEventListener('click', () => {
      this.editing = null;
      this.draw();
    });
    const form = h('form', { className: 'kb-readers-form', testid: 'kb-readers-form' },
      field('kb.readers_of', input, { labelParams: { name }, hintKey: 'reader.hint' }), preview, error,
      h('div', { className: 'admin-row' }, save, cancel));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const parsed = update();
      if (parsed.invalid.length > 0) {
        input.focus();
        return;
      }
      save.disabled = true;
      try {
        await api.setKnowledgeBaseReaders(name, parsed.readers);
      } catch (failure) {
        save.disabled = false;
        showError(error, failure);
        return;
      }
      this.editing = null;
      await this.refresh();
      bindText(this.status, 'kb.readers_saved', { name });
    });
    return form;
  }

  addForm() {
    const name = textInput({ testid: 'kb-add-name', required: true, maxLength: 64 });
    const path = textInput({ testid: 'kb-add-path', required: true });
    const readers = textInput({ testid: 'kb-add-readers' });
    readers.value = 'role:viewer';
    const error = errorLine('kb-add-error');
    const submit = button('kb.add.submit', { testid: 'kb-add-submit', className: 'button button-primary', type: 'submit' });
    const form = h('form', { className: 'admin-form kb-add-form', testid: 'kb-add-form' },
      h('div', { className: 'admin-grid' },
        field('kb.add.name', name, { hintKey: 'kb.add.name_hint' }),
        field('kb.add.path', path, { hintKey: 'kb.add.path_hint' }),
        field('kb.add.readers', readers, { hintKey: 'reader.hint' })),
      error, h('div', { className: 'admin-row' }, submit));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      hideError(error);
      const parsed = parseReaderList(readers.value);
      if (parsed.invalid.length > 0) {
        error.hidden = false;
        bindText(error, 'reader.invalid', { items: parsed.invalid.join(', ') });
        readers.focus();
        return;
      }
      if (!name.value.trim() || !path.value.trim()) {
        error.hidden = false;
        bindText(error, 'kb.add.missing');
        return;
      }
      submit.disabled = true;
      let added;
      try {
        added = await api.addKnowledgeBase(name.value.trim(), path.value.trim(), parsed.readers);
      } catch (failure) {
        showError(error, failure);
        return;
      } finally {
        submit.disabled = false;
      }
      const addedName = text(added?.name) || name.value.trim();
      name.value = '';
      path.value = '';
      await this.refresh();
      bindText(this.status, 'kb.added', { name: addedName });
      this.startSync(addedName);
    });
    return section('kb.add.title', { testid: 'kb-add' }, form);
  }
}
