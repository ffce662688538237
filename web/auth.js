// The two signed-out screens: the sign-in form, and the "create the first administrator" form
// reached through the `#bootstrap=TOKEN` link that the server prints on its first start.
// Each calls onSignedIn(user) once the server has set the session cookies.

import * as api from './api.js';
import { h, uniqueId } from './dom.js';
import { bindText, t } from './i18n.js';

const MIN_PASSWORD_CHARS = 8;

/** The sign-in screen. `notice` is an optional translation key shown above the form. */
export function loginScreen({ onSignedIn, languageToggle, notice = null }) {
  const name = field('login.name', { testid: 'login-name', type: 'text', autocomplete: 'username' });
  const password = field('login.password', { testid: 'login-password', type: 'password', autocomplete: 'current-password' });
  const error = errorLine('login-error');
  const submit = h('button', { type: 'submit', className: 'button button-primary', testid: 'login-submit' });
  bindText(submit, 'login.submit');
  if (notice) showError(error, notice);

  const form = h('form', { className: 'auth-form', attrs: { novalidate: '' } },
    name.wrapper, password.wrapper, error, submit);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!name.input.value.trim() || !password.input.value) {
      showError(error, 'login.missing');
      return;
    }
    setBusy(submit, 'login.busy');
    try {
      const user = await api.login(name.input.value.trim(), password.input.value);
      onSignedIn(user);
    } catch (failure) {
      showError(error, ...loginErrorMessage(failure));
      setBusy(submit, null, 'login.submit');
      password.input.select();
    }
  });
  queueMicrotask(() => name.input.focus());
  return authCard('login.title', 'login.intro', form, languageToggle);
}

/** The first-administrator screen for a bootstrap token taken from the URL. */
export function bootstrapScreen({ token, onSignedIn, onGoToLogin, languageToggle }) {
  const name = field('bootstrap.name', { testid: 'bootstrap-name', type: 'text', autocomplete: 'username' });
  const password = field('bootstrap.password', { testid: 'bootstrap-password', type: 'password', autocomplete: 'new-password' });
  const again = field('bootstrap.password_again', { testid: 'bootstrap-password-again', type: 'password', autocomplete: 'new-password' });
  const error = errorLine('bootstrap-error');
  const submit = h('button', { type: 'submit', className: 'button button-primary', testid: 'bootstrap-submit' });
  bindText(submit, 'bootstrap.submit');
  const toLogin = h('button', { type: 'button', className: 'button button-quiet', testid: 'bootstrap-to-login', hidden: true, on: { click: onGoToLogin } });
  bindText(toLogin, 'bootstrap.to_login');

  const form = h('form', { className: 'auth-form', attrs: { novalidate: '' } },
    name.wrapper, password.wrapper, again.wrapper, error, submit, toLogin);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const problem = !name.input.value.trim() ? 'bootstrap.missing_name'
      : [...password.input.value].length < MIN_PASSWORD_CHARS ? 'bootstrap.too_short'
        : password.input.value !== again.input.value ? 'bootstrap.mismatch' : null;
    if (problem) {
      showError(error, problem);
      return;
    }
    setBusy(submit, 'bootstrap.busy');
    try {
      const user = await api.bootstrap(token, name.input.value.trim(), password.input.value);
      onSignedIn(user);
    } catch (failure) {
      const tokenRefused = failure instanceof api.ApiError && [401, 403, 404, 409, 410].includes(failure.status);
      if (tokenRefused) {
        showError(error, 'bootstrap.bad_token');
        toLogin.hidden = false;
      } else {
        showError(error, ...loginErrorMessage(failure));
      }
      setBusy(submit, null, 'bootstrap.submit');
    }
  });
  queueMicrotask(() => name.input.focus());
  return authCard('bootstrap.title', 'bootstrap.intro', form, languageToggle, 'bootstrap-form');
}

/** The translation key and parameters explaining a failed sign-in. */
function loginErrorMessage(failure) {
  if (!(failure instanceof api.ApiError)) return ['error.generic', { message: String(failure) }];
  if (failure.status === 0) return ['error.network'];
  if (failure.status === 401) return ['login.bad_credentials'];
  if (failure.status === 429) {
    return failure.retryAfterSeconds !== null
      ? ['login.too_many', { seconds: failure.retryAfterSeconds }]
      : ['login.too_many_later'];
  }
  return ['error.generic', { message: failure.message }];
}

function authCard(titleKey, introKey, form, languageToggle, testid = 'login-form') {
  const title = bindText(h('h1', { className: 'auth-title', id: uniqueId('auth-title') }), titleKey);
  const intro = bindText(h('p', { className: 'auth-intro' }), introKey);
  const brand = h('div', { className: 'auth-brand' },
    h('span', { className: 'brand-mark', attrs: { 'aria-hidden': 'true' } }),
    h('span', { className: 'brand-name', text: t('app.name') }));
  return h('main', { className: 'auth-screen' },
    h('section', { className: 'auth-card', testid, attrs: { 'aria-labelledby': title.id } },
      h('div', { className: 'auth-top' }, brand, languageToggle), title, intro, form));
}

function field(labelKey, { testid, type, autocomplete }) {
  const id = uniqueId('field');
  const label = bindText(h('label', { htmlFor: id, className: 'field-label' }), labelKey);
  const input = h('input', {
    id,
    type,
    className: 'field-input',
    testid,
    required: true,
    attrs: { autocomplete, autocapitalize: 'none', spellcheck: 'false' },
  });
  return { input, wrapper: h('div', { className: 'field' }, label, input) };
}

function errorLine(testid) {
  return h('p', { className: 'form-error', testid, hidden: true, attrs: { role: 'alert' } });
}

function showError(element, key, params) {
  bindText(element, key, params);
  element.hidden = false;
}

function setBusy(button, busyKey, idleKey) {
  button.disabled = busyKey !== null;
  bindText(button, busyKey ?? idleKey);
}
