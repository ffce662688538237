// Helpers of the mock-backed browser tests (admin.test.mjs, admin-knowledge.test.mjs,
// memory.test.mjs): one Chromium and one mock server per file, pages that collect
// console errors, CSP violations and uncaught errors, sign-in, waiting for text, and the
// checks that hostile text stayed inert and that every bound string was translated.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startMockServer } from './mock-server.mjs';

export const TIMEOUT_MS = 15_000;
const POLL_INTERVAL_MS = 80;
export const ADMIN = { name: 'alice', password: 'correct-horse' };
export const OPERATOR = { name: 'otto', password: 'operator-horse' };
export const VIEWER = { name: 'vera', password: 'viewer-horse' };

/** Starts the mock and Chromium; returns {mock, browser, artifacts, problems, close()}. */
export async function startHarness(folder) {
  const artifacts = join(process.env.WARDEN_ARTIFACTS || 'tests/artifacts/browser', folder);
  mkdirSync(artifacts, { recursive: true });
  const mock = await startMockServer({ user: ADMIN.name, password: ADMIN.password });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const problems = [];
  return {
    mock, browser, artifacts, problems,
    close: async () => {
      await browser.close();
      await mock.close();
    },
  };
}

/**
 * A page of its own browser context that records problems. Responses the test provokes on
 * purpose (`expected`: regular expressions over "STATUS URL") are not problems.
 */
export async function newPage(harness, { expected = [], ...options } = {}) {
  const context = await harness.browser.newContext({ viewport: { width: 1200, height: 1000 }, locale: 'en-US', ...options });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT_MS);
  const statuses = [];
  page.on('response', (response) => statuses.push(`${response.status()} ${response.url()}`));
  page.on('console', (message) => {
    const text = message.text();
    if (message.type() !== 'error' && !/Content.Security.Policy/i.test(text)) return;
    const url = message.location().url ?? '';
    if (/status of 401/.test(text) && url.endsWith('/api/me')) return; // Before sign-in.
    if (/Failed to load resource/.test(text) && expected.some((pattern) => pattern.test(`${text.match(/status of (\d+)/)?.[1]} ${url}`))) return;
    harness.problems.push(`${text} (${url})`);
  });
  page.on('pageerror', (error) => harness.problems.push(String(error)));
  page.on('close', () => context.close().catch(() => {}));
  await page.exposeBinding('__reportCsp', (_source, text) => harness.problems.push(`CSP violation: ${text}`));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__reportCsp?.(`${event.violatedDirective} blocked ${event.blockedURI || 'inline'}`);
    });
  });
  return page;
}

export async function signIn(page, harness, account = ADMIN, hash = '') {
  await page.goto(`${harness.mock.url}/${hash}`);
  await page.getByTestId('login-name').fill(account.name);
  await page.getByTestId('login-password').fill(account.password);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('new-chat').waitFor();
}

/** Waits until the locator's first match is visible and its text holds `expected`. */
export async function expectText(locator, expected) {
  await locator.first().waitFor({ state: 'visible', timeout: TIMEOUT_MS });
  const deadline = Date.now() + TIMEOUT_MS;
  let text = '';
  while (Date.now() < deadline) {
    text = (await locator.first().textContent()) ?? '';
    if (typeof expected === 'string' ? text.includes(expected) : expected.test(text)) return;
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
  assert.fail(`expected ${expected} in ${JSON.stringify(text)}`);
}

export async function waitUntil(what, check, timeoutMs = TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
  assert.fail(`timed out waiting until ${what}`);
}

/** Hostile text stayed text: no handler ran, no element was made from it. */
export async function assertInert(page) {
  const findings = await page.evaluate(() => ({
    xss: window.__xss,
    alerts: window.__alerts ?? 0,
    images: document.querySelectorAll('img').length,
    scripts: document.querySelectorAll('body script').length,
  }));
  assert.deepEqual(findings, { xss: undefined, alerts: 0, images: 0, scripts: 0 });
}

/** Makes `alert()` count instead of blocking, so a hostile `alert(1)` would show. */
export async function countAlerts(page) {
  await page.addInitScript(() => {
    window.alert = () => {
      window.__alerts = (window.__alerts ?? 0) + 1;
    };
  });
}

/** No bound element shows its own key: every string it uses has a translation. */
export async function assertTranslated(page) {
  const untranslated = await page.evaluate(() => [...document.querySelectorAll('[data-i18n]')]
    .filter((element) => element.textContent === element.dataset.i18n)
    .map((element) => element.dataset.i18n));
  assert.deepEqual(untranslated, [], 'keys without a translation');
}

export function assertNoProblems(harness) {
  assert.deepEqual(harness.problems, [], 'console errors, CSP violations or uncaught errors');
}
