// The API tokens screen (`#/tokens`), for every signed-in user: their own tokens (label,
// id, created, active or revoked), a form to create one, and Revoke (after confirming). A new
// token's secret is shown once, with a copy button and a warning that it cannot be shown
// again; dismissing it, or leaving the screen, forgets it — the list only ever holds
// metadata. Admins may also look at, create and revoke another user's tokens.

import * as api from './api.js';
import { button, clearText, confirmingButton, dash, errorLine, field, hideError, screen, section, showError, statusLine, table, text, textInput } from './admin-common.js';
import { h } from './dom.js';
import { bindText, bindTime } from './i18n.js';

const MAX_LABEL_CHARS = 100;

/** Creates the screen for the signed-in `user`. Returns {element, show(), hide(), dispose()}. */
export function createTokensView({ user }) {
  return new TokensView(user);
}

class TokensView {
  constructor(user) {
    this.user = user;
    this.isAdmin = user.role === 'admin';
    this.generation = 0;
    /** Whose tokens are shown: the signed-in user, or (admins) another. */
    this.owner = user.name;
    const { element, body } = screen({ testid: 'tokens', titleKey: 'tokens.title', introKey: 'tokens.intro' });
    this.element = element;
    this.status = statusLine('tokens-status');
    this.error = errorLine('tokens-error');
    this.listBox = h('div');
    this.secretBox = h('div', { className: 'token-secret-box', hidden: true, testid: 'token-secret-box' });
    body.append(
      this.isAdmin ? this.ownerForm() : null,
      section('tokens.create.title', { testid: 'tokens-create' }, this.createForm(), this.secretBox),
      section('tokens.list.title', { testid: 'tokens-list' }, this.status, this.error, this.listBox));
  }

  show() {
    this.element.hidden = false;
    this.refresh();
  }

  /** Leaving the screen forgets a secret still shown. */
  hide() {
    this.element.hidden = true;
    this.forgetSecret();
  }

  dispose() {
    this.generation += 1;
    this.forgetSecret();
  }

  forgetSecret() {
    this.secretBox.replaceChildren();
    this.secretBox.hidden = true;
  }

  async refresh() {
    this.generation += 1;
    const mine = this.generation;
    let tokens;
    try {
      tokens = await api.listTokens(this.owner === this.user.name ? null : this.owner);
    } catch (error) {
      if (mine !== this.generation) return;
      showError(this.error, error);
      this.listBox.replaceChildren();
      return;
    }
    if (mine !== this.generation) return;
    hideError(this.error);
    this.draw(tokens);
  }

  draw(tokens) {
    if (tokens.length === 0) {
      this.listBox.replaceChildren(bindText(h('p', { className: 'admin-muted', testid: 'tokens-empty' }), 'tokens.none'));
      return;
    }
    const rows = tokens.map((token) => {
      const id = text(token.id);
      const revoked = typeof token.revoked_at === 'number';
      const state = revoked
        ? h('span', { className: 'badge user-state is-disabled', testid: 'token-state' }, bindText(h('span'), 'tokens.revoked'), ' ', bindTime(h('time'), token.revoked_at))
        : bindText(h('span', { className: 'badge user-state is-enabled', testid: 'token-state' }), 'tokens.active');
      const revoke = revoked ? dash() : confirmingButton({
        key: 'tokens.revoke', questionKey: 'tokens.revoke_question', questionParams: { label: text(token.label) }, confirmKey: 'tokens.revoke_confirm',
        testid: 'token-revoke', onConfirm: () => this.revoke(id),
      });
      return h('tr', { testid: 'token-row', data: { tokenId: id, revoked: String(revoked) } },
        h('th', { attrs: { scope: 'row' } }, h('span', { testid: 'token-label', text: text(token.label) })),
        h('td', {}, h('code', { className: 'token-id', testid: 'token-id', text: id })),
        h('td', {}, typeof token.created_at === 'number' ? bindTime(h('time'), token.created_at) : dash()),
        h('td', {}, state),
        h('td', { className: 'admin-actions' }, revoke));
    });
    this.listBox.replaceChildren(table(['tokens.col.label', 'tokens.col.id', 'tokens.col.created', 'tokens.col.status', 'tokens.col.actions'], rows, { testid: 'tokens-table' }));
  }

  async revoke(id) {
    hideError(this.error);
    try {
      await api.revokeToken(id);
    } catch (error) {
      showError(this.error, error);
      return;
    }
    await this.refresh();
    bindText(this.status, 'tokens.revoked_done');
  }

  createForm() {
    const label = textInput({ testid: 'token-label-input', required: true, maxLength: MAX_LABEL_CHARS });
    const error = errorLine('token-create-error');
    const submit = button('tokens.create.submit', { testid: 'token-create-submit', className: 'button button-primary', type: 'submit' });
    const form = h('form', { className: 'admin-form admin-inline', testid: 'token-create-form' },
      field('tokens.create.label', label, { hintKey: 'tokens.create.label_hint' }), h('div', { className: 'admin-row' }, submit), error);
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      hideError(error);
      if (!label.value.trim()) {
        error.hidden = false;
        bindText(error, 'tokens.create.missing');
        return;
      }
      submit.disabled = true;
      let created;
      try {
        created = await api.createToken(label.value.trim(), this.owner === this.user.name ? null : this.owner);
      } catch (failure) {
        showError(error, failure);
        return;
      } finally {
        submit.disabled = false;
      }
      label.value = '';
      this.showSecret(created ?? {});
      await this.refresh();
    });
    return form;
  }

  /** The one time a secret is on screen: read-only text, Copy, and a warning. */
  showSecret(created) {
    const secret = h('input', { className: 'field-input token-secret', testid: 'token-secret', type: 'text', attrs: { readonly: 'readonly', spellcheck: 'false', autocomplete: 'off' } });
    secret.value = text(created.secret);
    const copied = statusLine('token-copied');
    const copy = button('tokens.copy', { testid: 'token-copy', className: 'button button-small' });
    copy.addEventListener('click', async () => {
      const done = await copyText(secret);
      bindText(copied, done ? 'tokens.copied' : 'tokens.copy_failed');
    });
    const dismiss = button('tokens.dismiss', { testid: 'token-dismiss', className: 'button button-small button-quiet', onClick: () => this.forgetSecret() });
    this.secretBox.replaceChildren(
      bindText(h('p', { className: 'token-warning', testid: 'token-warning', attrs: { role: 'alert' } }), 'tokens.secret_warning', { label: text(created.label) }),
      field('tokens.secret', secret),
      h('div', { className: 'admin-row' }, copy, dismiss), copied);
    this.secretBox.hidden = false;
    secret.focus();
    secret.select();
  }

  /** Admins: whose tokens to show. */
  ownerForm() {
    const owner = textInput({ testid: 'tokens-owner', maxLength: 64 });
    owner.value = this.user.name;
    const submit = button('tokens.owner.show', { testid: 'tokens-owner-submit', className: 'button', type: 'submit' });
    const form = h('form', { className: 'admin-form admin-inline', testid: 'tokens-owner-form' },
      field('tokens.owner.label', owner, { hintKey: 'tokens.owner.hint' }), h('div', { className: 'admin-row' }, submit));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.owner = owner.value.trim() || this.user.name;
      owner.value = this.owner;
      this.forgetSecret();
      clearText(this.status);
      this.refresh();
    });
    return section('tokens.owner.title', { testid: 'tokens-owner-section' }, form);
  }
}

/** Copies the input's text: the Clipboard API, or selecting it and the copy command. */
async function copyText(input) {
  try {
    await navigator.clipboard.writeText(input.value);
    return true;
  } catch {
    input.select();
    try {
      return document.execCommand('copy');
    } catch {
      return false;
    }
  }
}
