// Browser tests of the web UI's edge cases against the in-memory mock server, which can do
// what the real model cannot do on demand: fail a run, simulate a server restart, stream
// slowly, drop event streams and replay events twice. Needs only Chromium:
//
//   node tests/browser/mock.test.mjs        (CHROMIUM, WARDEN_ARTIFACTS optional)
//
// It covers the first-administrator link, sign-in errors (401 and 429), an ended session,
// sign-out, the conversation list's paging, Stop, a failed run,
// a resumed run, no duplicated text under stream drops, and the dark and narrow layouts.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startMockServer } from './mock-server.mjs';

const TIMEOUT_MS = 20_000;
const POLL_INTERVAL_MS = 100;
const USER = 'alice';
const PASSWORD = 'correct-horse';
const artifacts = join(process.env.WARDEN_ARTIFACTS || 'tests/artifacts/browser', 'mock');

let browser;
let mock;
const problems = [];

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  mock = await startMockServer({ chaos: true, user: USER, password: PASSWORD });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  await mock?.close();
});

test('the #bootstrap link creates the first administrator', async () => {
  const fresh = await startMockServer({ bootstrap: true });
  const page = await newPage();
  try {
    await page.goto(fresh.bootstrapUrl);
    await page.getByTestId('bootstrap-name').fill('root');
    await page.getByTestId('bootstrap-password').fill('short');
    await page.getByTestId('bootstrap-password-again').fill('short');
    await page.getByTestId('bootstrap-submit').click();
    await expectText(page.getByTestId('bootstrap-error'), '8 characters');
    await page.getByTestId('bootstrap-password').fill('long enough');
    await page.getByTestId('bootstrap-password-again').fill('long enougH');
    await page.getByTestId('bootstrap-submit').click();
    await expectText(page.getByTestId('bootstrap-error'), 'differ');
    await page.screenshot({ path: join(artifacts, 'bootstrap.png') });
    await page.getByTestId('bootstrap-password-again').fill('long enough');
    await page.getByTestId('bootstrap-submit').click();
    await expectText(page.getByTestId('user'), 'root');
    assert.equal(new URL(page.url()).hash, '');
    assert.equal(fresh.state.users.length, 1);
    assert.equal(fresh.state.users[0].role, 'admin');
  } finally {
    await page.close();
    await fresh.close();
  }
});

test('sign-in explains wrong passwords and rate limiting', async () => {
  const page = await newPage();
  try {
    await page.goto(mock.url);
    await page.getByTestId('login-name').fill('mallory');
    await page.getByTestId('login-password').fill('guess');
    await page.getByTestId('login-submit').click();
    await expectText(page.getByTestId('login-error'), 'Wrong name or password');
    for (let attempt = 0; attempt < 5; attempt += 1) await page.getByTestId('login-submit').click();
    await expectText(page.getByTestId('login-error'), /Try again in \d+ s/);
    await page.screenshot({ path: join(artifacts, 'login-rate-limited.png') });
  } finally {
    await page.close();
  }
});

test('an ended session returns to sign-in, and Sign out signs out', async () => {
  const page = await signedInPage();
  try {
    // Let the signed-in page finish loading first: a request still in flight when the
    // session ends would show the sign-in form before the message is sent.
    await page.waitForLoadState('networkidle');
    mock.state.sessions.clear(); // As if the session expired on the server.
    await send(page, 'Anyone there?');
    await expectText(page.getByTestId('login-error'), 'session ended');
    await page.getByTestId('login-name').fill(USER);
    await page.getByTestId('login-password').fill(PASSWORD);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('logout').click();
    await page.getByTestId('login-name').waitFor();
    const me = await page.request.get(`${mock.url}/api/me`);
    assert.equal(me.status(), 401);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('the conversation list loads older pages on demand', async () => {
  const page = await signedInPage();
  try {
    const user = mock.state.users.find((u) => u.name === USER);
    const now = Math.floor(Date.now() / 1000);
    for (let n = 0; n < 3; n += 1) {
      const id = mock.state.nextId++;
      mock.state.conversations.set(id, { id, userId: user.id, title: `paged ${n}`, created_at: now - 100 - n, updated_at: now - 100 - n, messages: [] });
    }
    const total = [...mock.state.conversations.values()].filter((c) => c.userId === user.id).length;
    mock.state.conversationPageSize = 2;
    await page.reload();
    const items = page.getByTestId('conversation-item');
    await page.getByTestId('conversations-older').waitFor({ state: 'visible' });
    assert.equal(await items.count(), 2);
    while (await page.getByTestId('conversations-older').isVisible()) {
      const shown = await items.count();
      await page.getByTestId('conversations-older').click();
      await page.waitForFunction((n) => document.querySelectorAll('[data-testid="conversation-item"]').length > n, shown);
    }
    const ids = await items.evaluateAll((links) => links.map((link) => link.dataset.conversationId));
    assert.equal(ids.length, total);
    assert.equal(new Set(ids).size, total, 'no conversation is listed twice');
    assertNoProblems();
  } finally {
    mock.state.conversationPageSize = 50;
    await page.close();
  }
});

test('Stop cancels the run and a reload shows why there is no answer', async () => {
  const page = await signedInPage();
  try {
    await send(page, '[[slow]] Explain disk quotas.');
    await waitForLiveText(page);
    await page.getByTestId('stop').click();
    await expectText(page.locator('[data-testid="run-status"][data-status="cancelled"]'), 'stopped');
    await page.getByTestId('send').waitFor({ state: 'visible' });
    await page.reload();
    await expectText(page.locator('.run-notice [data-testid="run-status"]'), 'stopped');
    assert.equal(await page.locator('[data-role="assistant"]').count(), 0);
    await page.screenshot({ path: join(artifacts, 'cancelled.png') });
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('a failed run shows its reason, live and after a reload', async () => {
  const page = await signedInPage();
  try {
    await send(page, '[[fail]] Why is the disk full?');
    await expectText(page.locator('[data-testid="run-status"][data-status="failed"]'), 'mock failure');
    await page.screenshot({ path: join(artifacts, 'failed-live.png') });
    await page.reload();
    await expectText(page.locator('.run-notice [data-testid="run-status"]'), 'mock failure');
    await page.locator('.run-notice').getByTestId('timeline-toggle').click();
    await expectText(page.locator('.run-notice').getByTestId('timeline'), 'run.failed');
    await page.screenshot({ path: join(artifacts, 'failed-reloaded.png') });
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('dropped streams and a resumed run never duplicate text', async () => {
  const page = await signedInPage();
  try {
    // Chaos mode ends the stream every few events and replays three events the page already
    // has; the resume drops the last five characters streamed before the "restart".
    await send(page, '[[resume]] My disk is full, what now?');
    const live = page.locator('[data-live="true"] [data-testid="message-body"]');
    // The stream ends when the stored answer replaces the live message. The live message may
    // be missing for a moment between a dropped stream and its resume, so a missing live
    // message does not end the watch; only the stored answer does.
    const answer = page.locator('[data-testid="message"][data-role="assistant"]:not([data-live])');
    const snapshots = [];
    const deadline = Date.now() + TIMEOUT_MS;
    while (Date.now() < deadline && (await answer.count()) === 0) {
      const text = await live.textContent({ timeout: 200 }).catch(() => null);
      if (text) snapshots.push(text);
      await page.waitForTimeout(POLL_INTERVAL_MS);
    }
    await answer.first().waitFor({ timeout: TIMEOUT_MS });
    const conversation = await getJson(page, `/api/conversations/${conversationId(page)}`);
    const stored = conversation.messages.find((m) => m.role === 'assistant');
    assert.equal(await answer.getAttribute('data-message-id'), String(stored.id));
    const final = letters(await answer.locator('[data-testid="message-body"]').textContent());
    assert.ok(snapshots.length > 5, 'saw the answer stream');
    for (const snapshot of snapshots) {
      // Text shown before the resume may end in the five characters the restart lost.
      const shown = letters(snapshot).slice(0, -5);
      assert.ok(final.startsWith(shown), `streamed text is not a prefix of the answer:\n${snapshot}`);
    }
    const run = mock.state.runs.get(stored.run_id);
    const deltas = run.events.filter((event) => event.type === 'message.delta').length;
    await answer.getByTestId('timeline-toggle').click();
    const timeline = answer.getByTestId('timeline');
    await expectText(timeline, 'run.resumed');
    await expectText(timeline, `message.delta ×${deltas - 15}`); // The deltas after the resume.
    await page.screenshot({ path: join(artifacts, 'resumed.png') });
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('dark colours and a narrow screen', async () => {
  const page = await signedInPage({ colorScheme: 'dark', viewport: { width: 390, height: 780 } });
  try {
    // The sidebar is folded away on a narrow screen; signing in opens the new-chat state.
    await send(page, 'What should I check first when a disk is full?', { newChat: false });
    await page.locator('[data-testid="message"][data-role="assistant"]:not([data-live])').waitFor({ timeout: TIMEOUT_MS });
    await page.screenshot({ path: join(artifacts, 'dark-narrow.png') });
    await page.locator('.menu-button').click();
    await page.getByTestId('conversation-item').first().waitFor({ state: 'visible' });
    await page.waitForTimeout(300); // Let the sidebar finish sliding in.
    await page.screenshot({ path: join(artifacts, 'dark-narrow-menu.png') });
    await page.getByTestId('conversation-item').first().click();
    await page.waitForFunction(() => !document.body.classList.contains('menu-open'));
    assertNoProblems();
  } finally {
    await page.close();
  }
});

// --- Helpers ------------------------------------------------------------------------------------

async function newPage(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 }, locale: 'en-US', ...options });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT_MS);
  page.on('console', (message) => {
    const text = message.text();
    if (message.type() !== 'error' && !/Content.Security.Policy/i.test(text)) return;
    if (/status of (401|429)/.test(text)) return; // Expected answers to /api/me and bad sign-ins.
    problems.push(`${text} (${message.location().url})`);
  });
  page.on('pageerror', (error) => problems.push(String(error)));
  page.on('close', () => context.close().catch(() => {}));
  return page;
}

async function signedInPage(options) {
  const page = await newPage(options);
  await page.goto(mock.url);
  await page.getByTestId('login-name').fill(USER);
  await page.getByTestId('login-password').fill(PASSWORD);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('new-chat').waitFor();
  return page;
}

async function send(page, text, { newChat = true } = {}) {
  if (newChat) await page.getByTestId('new-chat').click();
  await page.getByTestId('composer').fill(text);
  await page.getByTestId('composer').press('Enter');
}

async function waitForLiveText(page) {
  const live = page.locator('[data-live="true"] [data-testid="message-body"]');
  await page.waitForFunction((element) => element && element.textContent.trim() !== '', await live.elementHandle(), { timeout: TIMEOUT_MS });
}

async function expectText(locator, expected) {
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

async function getJson(page, path) {
  const response = await page.request.get(mock.url + path);
  assert.ok(response.ok());
  return response.json();
}

function conversationId(page) {
  return /#\/c\/(\d+)/.exec(page.url())[1];
}

/** Only the letters of a text: what survives rendering markdown whatever its syntax. */
function letters(text) {
  return [...(text ?? '')].filter((char) => /\p{L}/u.test(char)).join('');
}

function assertNoProblems() {
  assert.deepEqual(problems, [], 'console errors, CSP violations or uncaught errors');
}
