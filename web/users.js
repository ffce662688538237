// The Users screen (`#/users`, admins only): every account with its role (a select that
// saves on change), whether it is enabled (Disable asks first), its groups (checkboxes of the
// existing groups), when it was created, and a password reset; a form to create an account;
// and the groups themselves (create, and remove after confirming). An admin's own row
// cannot demote or disable them: the server refuses it too (409), and the message shows.

import * as api from './api.js';
import {
  button, clearText, confirmingButton, dash, errorLine, field, hideError, screen, section, select, showError, statusLine, table, text,
  textInput,
} from './admin-common.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, bindTime } from './i18n.js';

const ROLES = [['viewer', 'role.viewer'], ['operator', 'role.operator'], ['admin', 'role.admin']];
const MIN_PASSWORD_CHARS = 8;

/** Creates the screen for the signed-in `user`. Returns {element, show(), hide(), dispose()}. */
export function createUsersView({ user }) {
  return new UsersView(user);
}

class UsersView {
  constructor(user) {
    this.user = user;
    this.generation = 0;
    this.users = [];
    this.groups = [];
    /** The user whose groups or password form is open: {name, what}, or null. */
    this.open = null;
    const { element, body } = screen({ testid: 'users', titleKey: 'users.title', introKey: 'users.intro' });
    this.element = element;
    this.body = body;
    this.status = statusLine('users-status');
    this.error = errorLine('users-error');
    this.tableBox = h('div');
    this.groupsBox = h('div');
    this.groupsError = errorLine('groups-error');
    this.groupsStatus = statusLine('groups-status');
    this.createGroups = h('div');
    this.createBox = this.createForm();
    body.append(
      section('users.list.title', { testid: 'users-list' }, this.status, this.error, this.tableBox),
      section('users.create.title', { testid: 'users-create' }, this.createBox),
      section('groups.title', { testid: 'groups' }, this.groupsStatus, this.groupsError, this.groupForm(), this.groupsBox));
  }

  show() {
    this.element.hidden = false;
    if (this.user.role !== 'admin') {
      this.body.replaceChildren(bindText(h('p', { className: 'form-error', testid: 'users-forbidden', attrs: { role: 'alert' } }), 'admin.admins_only'));
      return;
    }
    this.refresh();
  }

  hide() {
    this.element.hidden = true;
  }

  dispose() {
    this.generation += 1;
  }

  async refresh() {
    this.generation += 1;
    const mine = this.generation;
    if (this.users.length === 0) bindText(this.status, 'users.loading');
    let users;
    let groups;
    try {
      [users, groups] = await Promise.all([api.listUsers(), api.listGroups()]);
    } catch (error) {
      if (mine !== this.generation) return;
      clearText(this.status);
      showError(this.error, error);
      return;
    }
    if (mine !== this.generation) return;
    hideError(this.error);
    this.users = users;
    this.groups = groups;
    this.draw();
  }

  draw() {
    if (this.status.dataset.i18n === 'users.loading') clearText(this.status);
    const columns = ['users.col.name', 'users.col.role', 'users.col.status', 'users.col.groups', 'users.col.created', 'users.col.actions'];
    const rows = this.users.flatMap((user) => this.rows(user, columns.length));
    this.tableBox.replaceChildren(table(columns, rows, { testid: 'users-table', caption: 'users.list.title' }));
    this.drawCreateGroups();
    this.drawGroups();
  }

  rows(user, width) {
    const name = text(user.name);
    const self = name === this.user.name;
    const role = select(ROLES, { testid: 'user-role-select', value: text(user.role) });
    bindAttr(role, 'aria-label', 'users.role_of', { name });
    role.disabled = self;
    role.addEventListener('change', () => this.change(name, { role: role.value }, 'users.saved_role'));
    const disabled = user.disabled === true;
    const state = bindText(h('span', { className: `badge user-state ${disabled ? 'is-disabled' : 'is-enabled'}`, testid: 'user-state' }),
      disabled ? 'users.disabled' : 'users.enabled');
    const toggle = disabled
      ? button('users.enable', { testid: 'user-enable', onClick: () => this.change(name, { disabled: false }, 'users.saved_enabled') })
      : confirmingButton({
        key: 'users.disable', questionKey: 'users.disable_question', questionParams: { name }, confirmKey: 'users.disable_confirm',
        testid: 'user-disable', onConfirm: () => this.change(name, { disabled: true }, 'users.saved_disabled'),
      });
    if (self && !disabled) toggle.hidden = true;
    const groups = Array.isArray(user.groups) ? user.groups.map(text).filter(Boolean) : [];
    const groupCell = groups.length > 0
      ? h('span', { className: 'admin-readers' }, groups.map((group) => h('span', { className: 'chip', testid: 'user-group', text: group })))
      : dash();
    const editGroups = button('users.edit_groups', { testid: 'user-edit-groups', onClick: () => this.toggle(name, 'groups') });
    editGroups.setAttribute('aria-expanded', String(this.open?.name === name && this.open.what === 'groups'));
    const password = button('users.reset_password', { testid: 'user-reset-password', onClick: () => this.toggle(name, 'password') });
    password.setAttribute('aria-expanded', String(this.open?.name === name && this.open.what === 'password'));
    const nameCell = h('th', { attrs: { scope: 'row' } },
      h('span', { className: 'user-name-cell', testid: 'user-name', text: name }),
      self ? bindText(h('span', { className: 'chip user-you' }), 'users.you') : null);
    const row = h('tr', { testid: 'user-row', data: { user: name, disabled: String(disabled) } },
      nameCell,
      h('td', {}, role),
      h('td', {}, state),
      h('td', { testid: 'user-groups' }, groupCell),
      h('td', {}, typeof user.created_at === 'number' ? bindTime(h('time'), user.created_at) : dash()),
      h('td', { className: 'admin-actions' }, toggle, editGroups, password));
    if (this.open?.name !== name) return [row];
    const form = this.open.what === 'groups' ? this.groupsEditor(name, groups) : this.passwordForm(name);
    return [row, h('tr', { className: 'kb-detail-row', testid: 'user-detail', data: { user: name } }, h('td', { attrs: { colspan: String(width) } }, form))];
  }

  toggle(name, what) {
    this.open = this.open?.name === name && this.open.what === what ? null : { name, what };
    this.draw();
    this.tableBox.querySelector('[data-testid="user-detail"] input')?.focus();
  }

  /** Saves a change to one user and shows the outcome. */
  async change(name, changes, savedKey) {
    hideError(this.error);
    try {
      await api.updateUser(name, changes);
    } catch (error) {
      await this.refresh(); // Puts back what the server kept (a refused role, say).
      showError(this.error, error);
      return false;
    }
    await this.refresh();
    bindText(this.status, savedKey, { name });
    return true;
  }

  groupsEditor(name, current) {
    const error = errorLine('user-groups-error');
    const boxes = this.groups.map((group) => {
      const id = uniqueId('group');
      const box = h('input', { type: 'checkbox', id, testid: 'user-group-checkbox', value: text(group.name) });
      box.checked = current.includes(text(group.name));
      return h('label', { className: 'admin-check', htmlFor: id }, box, h('span', { text: text(group.name) }));
    });
    const save = button('admin.save', { testid: 'user-groups-save', className: 'button button-small button-primary', type: 'submit' });
    const cancel = button('admin.cancel', { testid: 'user-groups-cancel', className: 'button button-small button-quiet', onClick: () => this.toggle(name, 'groups') });
    const legend = bindText(h('legend', { className: 'field-label' }), 'users.groups_of', { name });
    const fieldset = h('fieldset', { className: 'admin-fieldset' }, legend,
      boxes.length > 0 ? h('div', { className: 'admin-checks' }, boxes) : bindText(h('p', { className: 'admin-muted' }), 'groups.none'));
    const form = h('form', { className: 'admin-inline-form', testid: 'user-groups-form' }, fieldset, error, h('div', { className: 'admin-row' }, save, cancel));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const chosen = [...form.querySelectorAll('input[type="checkbox"]:checked')].map((box) => box.value);
      save.disabled = true;
      try {
        await api.updateUser(name, { groups: chosen });
      } catch (failure) {
        save.disabled = false;
        showError(error, failure);
        return;
      }
      this.open = null;
      await this.refresh();
      bindText(this.status, 'users.saved_groups', { name });
    });
    return form;
  }

  passwordForm(name) {
    const password = textInput({ testid: 'user-password-new', type: 'password', autocomplete: 'new-password', required: true });
    const again = textInput({ testid: 'user-password-again', type: 'password', autocomplete: 'new-password', required: true });
    const error = errorLine('user-password-error');
    const save = button('users.reset_password_save', { testid: 'user-password-save', className: 'button button-small button-primary', type: 'submit' });
    const cancel = button('admin.cancel', { testid: 'user-password-cancel', className: 'button button-small button-quiet', onClick: () => this.toggle(name, 'password') });
    const form = h('form', { className: 'admin-inline-form', testid: 'user-password-form' },
      h('div', { className: 'admin-grid' },
        field('users.new_password', password, { labelParams: { name }, hintKey: 'users.password_hint', hintParams: { min: MIN_PASSWORD_CHARS } }),
        field('users.password_again', again)),
      bindText(h('p', { className: 'admin-muted' }), 'users.reset_ends_sessions'),
      error, h('div', { className: 'admin-row' }, save, cancel));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      hideError(error);
      if ([...password.value].length < MIN_PASSWORD_CHARS) {
        error.hidden = false;
        bindText(error, 'users.password_short', { min: MIN_PASSWORD_CHARS });
        return;
      }
      if (password.value !== again.value) {
        error.hidden = false;
        bindText(error, 'users.password_mismatch');
        return;
      }
      save.disabled = true;
      try {
        await api.resetPassword(name, password.value);
      } catch (failure) {
        save.disabled = false;
        showError(error, failure);
        return;
      }
      this.open = null;
      this.draw();
      bindText(this.status, 'users.password_reset_done', { name });
    });
    return form;
  }

  createForm() {
    const name = textInput({ testid: 'user-create-name', required: true, maxLength: 64 });
    const role = select(ROLES, { testid: 'user-create-role', value: 'viewer' });
    const password = textInput({ testid: 'user-create-password', type: 'password', autocomplete: 'new-password', required: true });
    const error = errorLine('user-create-error');
    const submit = button('users.create.submit', { testid: 'user-create-submit', className: 'button button-primary', type: 'submit' });
    const form = h('form', { className: 'admin-form', testid: 'user-create-form' },
      h('div', { className: 'admin-grid' },
        field('users.create.name', name, { hintKey: 'users.name_hint' }),
        field('users.create.role', role),
        field('users.create.password', password, { hintKey: 'users.password_hint', hintParams: { min: MIN_PASSWORD_CHARS } })),
      this.createGroups,
      error, h('div', { className: 'admin-row' }, submit));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      hideError(error);
      if (!name.value.trim()) {
        error.hidden = false;
        bindText(error, 'users.name_missing');
        return;
      }
      if ([...password.value].length < MIN_PASSWORD_CHARS) {
        error.hidden = false;
        bindText(error, 'users.password_short', { min: MIN_PASSWORD_CHARS });
        return;
      }
      const groups = [...form.querySelectorAll('input[type="checkbox"]:checked')].map((box) => box.value);
      submit.disabled = true;
      let created;
      try {
        created = await api.createUser({ name: name.value.trim(), role: role.value, password: password.value, groups });
      } catch (failure) {
        submit.disabled = false;
        showError(error, failure);
        return;
      }
      submit.disabled = false;
      name.value = '';
      password.value = '';
      for (const box of this.createGroups.querySelectorAll('input')) box.checked = false;
      await this.refresh();
      bindText(this.status, 'users.created', { name: text(created?.name) });
    });
    return form;
  }

  /** The create form's group checkboxes, keeping what was ticked. */
  drawCreateGroups() {
    const ticked = new Set([...this.createGroups.querySelectorAll('input:checked')].map((box) => box.value));
    const boxes = this.groups.map((group) => {
      const id = uniqueId('new-group');
      const box = h('input', { type: 'checkbox', id, testid: 'user-create-group', value: text(group.name) });
      box.checked = ticked.has(text(group.name));
      return h('label', { className: 'admin-check', htmlFor: id }, box, h('span', { text: text(group.name) }));
    });
    this.createGroups.replaceChildren(boxes.length > 0
      ? h('fieldset', { className: 'admin-fieldset' }, bindText(h('legend', { className: 'field-label' }), 'users.create.groups'), h('div', { className: 'admin-checks' }, boxes))
      : '');
  }

  // --- Groups ------------------------------------------------------------------------------------

  groupForm() {
    const name = textInput({ testid: 'group-create-name', required: true, maxLength: 64 });
    const submit = button('groups.create', { testid: 'group-create-submit', className: 'button button-primary', type: 'submit' });
    const form = h('form', { className: 'admin-form admin-inline', testid: 'group-create-form' },
      field('groups.name', name, { hintKey: 'groups.name_hint' }), h('div', { className: 'admin-row' }, submit));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      hideError(this.groupsError);
      if (!name.value.trim()) return;
      submit.disabled = true;
      try {
        const group = await api.createGroup(name.value.trim());
        name.value = '';
        await this.refresh();
        bindText(this.groupsStatus, 'groups.created', { name: text(group?.name) });
      } catch (failure) {
        showError(this.groupsError, failure);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  drawGroups() {
    if (this.groups.length === 0) {
      this.groupsBox.replaceChildren(bindText(h('p', { className: 'admin-muted', testid: 'groups-empty' }), 'groups.none'));
      return;
    }
    const rows = this.groups.map((group) => {
      const name = text(group.name);
      const members = Array.isArray(group.members) ? group.members.map(text).filter(Boolean) : [];
      const remove = confirmingButton({
        key: 'groups.remove', questionKey: 'groups.remove_question', questionParams: { name }, confirmKey: 'groups.remove_confirm',
        testid: 'group-remove',
        onConfirm: async () => {
          try {
            await api.removeGroup(name);
          } catch (failure) {
            showError(this.groupsError, failure);
            return;
          }
          await this.refresh();
          bindText(this.groupsStatus, 'groups.removed', { name });
        },
      });
      return h('tr', { testid: 'group-row', data: { group: name } },
        h('th', { attrs: { scope: 'row' } }, h('span', { testid: 'group-name', text: name })),
        h('td', { testid: 'group-members' }, members.length > 0 ? members.join(', ') : dash()),
        h('td', {}, typeof group.created_at === 'number' ? bindTime(h('time'), group.created_at) : dash()),
        h('td', { className: 'admin-actions' }, remove));
    });
    this.groupsBox.replaceChildren(table(['groups.col.name', 'groups.col.members', 'groups.col.created', 'groups.col.actions'], rows, { testid: 'groups-table' }));
  }
}
