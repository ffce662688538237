// The browser end-to-end test of Warden's web UI: sign in, stream an answer, reload while
// it streams, check that hostile markdown stays inert, open a run timeline and switch the
// language. It drives the system Chromium through playwright-core against a running server:
//
//   WARDEN_URL=http://127.0.0.1:8080 WARDEN_USER=alice WARDEN_PASSWORD=… \
//   WARDEN_ARTIFACTS=tests/artifacts/browser node tests/browser/chat.test.mjs
//
// CHROMIUM overrides the browser path (default /usr/bin/chromium). Screenshots of each step,
// and failure.png when a step fails, go to WARDEN_ARTIFACTS.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

/** The real model is a 135M model on a small CPU: one answer may take this long. */
const RUN_TIMEOUT_MS = 120_000;
const UI_TIMEOUT_MS = 15_000;
const POLL_INTERVAL_MS = 250;
// Small talk: the agent answers it in one streamed step (the server runs without a
// knowledge base here).
const FIRST_QUESTION = 'Hello! Please introduce yourself in a few sentences.';
const HOSTILE_MESSAGE = [
  'Please repeat these back exactly:',
  '',
  '<img src=x onerror="window.__xss=1">',
  '',
  '[click me](javascript:window.__xss=2)',
  '',
  '[x]( JaVaScRiPt:window.__xss=3)',
].join('\n');

const config = {
  url: requiredEnv('WARDEN_URL').replace(/\/+$/, ''),
  user: requiredEnv('WARDEN_USER'),
  password: requiredEnv('WARDEN_PASSWORD'),
  artifacts: process.env.WARDEN_ARTIFACTS || 'tests/artifacts/browser',
  chromium: process.env.CHROMIUM || '/usr/bin/chromium',
};

let browser;
let context;
let page;
const consoleErrors = [];
const pageErrors = [];
/** What the steps learn and later steps use. */
const shared = { conversationId: null, firstRunId: null, failedStep: null };

before(async () => {
  mkdirSync(config.artifacts, { recursive: true });
  browser = await chromium.launch({
    executablePath: config.chromium,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 860 }, locale: 'en-US' });
  page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  page.on('console', (message) => {
    const text = message.text();
    if (/Content.Security.Policy/i.test(text)) {
      consoleErrors.push(`CSP: ${text}`);
      return;
    }
    if (message.type() !== 'error') return;
    // The page asks /api/me before sign-in; Chromium logs that expected 401 as an error.
    if (/status of 401/.test(text) && /\/api\/me$/.test(message.location().url ?? '')) return;
    consoleErrors.push(`${text} (${message.location().url ?? 'unknown source'})`);
  });
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  await page.exposeBinding('__reportCsp', (_source, text) => consoleErrors.push(`CSP violation: ${text}`));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__reportCsp?.(`${event.violatedDirective} blocked ${event.blockedURI || 'inline'}`);
    });
  });
});

after(async () => {
  await browser?.close();
});

test('a) sign in under a strict Content-Security-Policy', async (t) => {
  await step(t, 'a-login', async () => {
    const response = await page.goto(config.url + '/', { waitUntil: 'domcontentloaded' });
    assert.equal(response.status(), 200);
    const csp = response.headers()['content-security-policy'] ?? '';
    assert.match(csp, /script-src 'self'/, `CSP header: ${csp}`);
    assert.doesNotMatch(csp, /unsafe-inline/);

    await page.getByTestId('login-name').waitFor();
    await assertVisible(page.getByTestId('login-password'));
    await assertVisible(page.getByTestId('login-submit'));
    await screenshot('a-login-form');

    await page.getByTestId('login-name').fill(config.user);
    await page.getByTestId('login-password').fill(config.password);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('new-chat').waitFor();
    await assertVisible(page.getByTestId('logout'));
    assert.ok((await page.getByTestId('user').textContent()).includes(config.user));
    assertNoBrowserErrors();
  });
});

test('b) stream an answer, reload mid-stream, see it exactly once', async (t) => {
  await step(t, 'b-stream', async () => {
    await page.getByTestId('new-chat').click();
    await page.getByTestId('composer').fill(FIRST_QUESTION);
    await page.getByTestId('send').click();

    const liveBody = page.locator('[data-testid="message"][data-live="true"] [data-testid="message-body"]');
    await waitUntil('the live answer shows text', async () => ((await liveBody.textContent({ timeout: 1000 }).catch(() => '')) ?? '').trim() !== '', RUN_TIMEOUT_MS);
    await assertVisible(page.getByTestId('stop'));
    await screenshot('b-streaming');

    shared.conversationId = conversationIdFromUrl();
    const runId = await runIdOfLastUserMessage(shared.conversationId);
    shared.firstRunId = runId;
    const before = await getJson(`/api/runs/${runId}`);
    if (before.status === 'completed') console.log('# note: the run completed before the reload; reload still checked');
    else console.log(`# reloading while the run is ${before.status}`);

    await page.reload({ waitUntil: 'domcontentloaded' });
    await page.getByTestId('composer').waitFor();
    const run = await waitForRun(runId);
    assert.equal(run.status, 'completed', `run ended as ${run.status}: ${run.failure_reason}`);

    const conversation = await getJson(`/api/conversations/${shared.conversationId}`);
    const answers = conversation.messages.filter((m) => m.role === 'assistant');
    assert.equal(answers.length, 1);
    const stored = answers[0];
    const assistantBubbles = page.locator('[data-testid="message"][data-role="assistant"]');
    await waitUntil('the live bubble became the stored answer', async () =>
      (await page.locator('[data-live="true"]').count()) === 0
        && (await assistantBubbles.count()) === 1
        && (await assistantBubbles.first().getAttribute('data-message-id')) === String(stored.id), UI_TIMEOUT_MS);
    assert.equal(await page.locator('[data-testid="message"][data-role="user"]').count(), 1);
    const shown = await assistantBubbles.first().locator('[data-testid="message-body"]').textContent();
    assertRenderedFrom(shown, stored.content);
    await screenshot('b-after-reload');
    assertNoBrowserErrors();
  });
});

test('c) hostile markdown and HTML stay inert', async (t) => {
  await step(t, 'c-xss', async () => {
    const composer = page.getByTestId('composer');
    await composer.fill(HOSTILE_MESSAGE);
    await page.getByTestId('send').click();
    const userBubbles = page.locator('[data-testid="message"][data-role="user"]');
    await waitUntil('the second user message appears', async () => (await userBubbles.count()) === 2, UI_TIMEOUT_MS);
    const runId = await runIdOfLastUserMessage(shared.conversationId);
    await waitForRun(runId);
    await waitUntil('the second answer settles', async () => (await page.locator('[data-live="true"]').count()) === 0, UI_TIMEOUT_MS);

    const hostileBubble = userBubbles.nth(1);
    await assertVisible(hostileBubble.getByText('<img src=x', { exact: false }));
    const findings = await page.evaluate(() => ({
      xss: window.__xss,
      images: document.querySelectorAll('[data-testid="message-body"] img').length,
      scriptLinks: [...document.querySelectorAll('a[href]')]
        .map((a) => a.getAttribute('href'))
        .filter((href) => /^(javascript|vbscript|data):/i.test(href.replace(/[\u0000-\u0020]+/g, ''))),
    }));
    assert.equal(findings.xss, undefined);
    assert.equal(findings.images, 0);
    assert.deepEqual(findings.scriptLinks, []);

    const pagesBefore = context.pages().length;
    const urlBefore = page.url();
    await hostileBubble.getByText('click me').click();
    await hostileBubble.getByText('x', { exact: true }).click();
    await page.waitForTimeout(500);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.equal(page.url(), urlBefore);
    assert.equal(context.pages().length, pagesBefore);
    await screenshot('c-hostile-message');
    assertNoBrowserErrors();
  });
});

test('d) the run timeline and the Chinese interface', async (t) => {
  await step(t, 'd-timeline-language', async () => {
    const firstAnswer = page.locator(`[data-testid="message"][data-role="assistant"][data-run-id="${shared.firstRunId}"]`);
    await firstAnswer.getByTestId('timeline-toggle').click();
    const timeline = firstAnswer.getByTestId('timeline');
    await assertVisible(timeline);
    await waitUntil('the timeline lists run.started and run.completed', async () => {
      const text = (await timeline.textContent()) ?? '';
      return text.includes('run.started') && text.includes('run.completed');
    }, UI_TIMEOUT_MS);
    assert.match((await timeline.textContent()) ?? '', /message\.delta ×\d+/);
    await screenshot('d-timeline');

    const newChat = page.getByTestId('new-chat');
    assert.equal((await newChat.textContent()).trim().replace(/^\+\s*/, ''), 'New chat');
    await page.getByTestId('lang-toggle').click();
    await waitUntil('the interface switches to Chinese', async () => (await newChat.textContent()).includes('新对话'), UI_TIMEOUT_MS);
    assert.equal(await page.evaluate(() => document.documentElement.lang), 'zh-CN');
    assert.equal((await page.getByTestId('send').textContent()).trim(), '发送');
    await screenshot('d-chinese');
    assertNoBrowserErrors();
  });
});

// --- Helpers ----------------------------------------------------------------------------------

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) throw new Error(`set ${name} (see tests/browser/README.md)`);
  return value;
}

/**
 * Runs one step, skipped when an earlier one failed (each builds on the last). On failure
 * it saves failure.png (the first failure's page) and failure-<step>.png, then rethrows.
 */
async function step(t, name, body) {
  if (shared.failedStep) {
    t.skip(`step ${shared.failedStep} failed`);
    return;
  }
  try {
    await body();
  } catch (error) {
    shared.failedStep = name;
    await page?.screenshot({ path: join(config.artifacts, 'failure.png'), fullPage: true }).catch(() => {});
    await page?.screenshot({ path: join(config.artifacts, `failure-${name}.png`), fullPage: true }).catch(() => {});
    throw error;
  }
}

async function screenshot(name) {
  await page.screenshot({ path: join(config.artifacts, `${name}.png`) });
}

async function assertVisible(locator) {
  await locator.first().waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
}

/** Polls `check` until it returns true, failing with `what` after timeoutMs. */
async function waitUntil(what, check, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
}

/** GETs an API path with the page's cookies. */
async function getJson(path) {
  const response = await page.request.get(config.url + path, { timeout: UI_TIMEOUT_MS });
  assert.ok(response.ok(), `GET ${path} answered ${response.status()}`);
  return response.json();
}

async function waitForRun(runId) {
  let run;
  await waitUntil(`run ${runId} finishes`, async () => {
    run = await getJson(`/api/runs/${runId}`);
    return !['queued', 'running'].includes(run.status);
  }, RUN_TIMEOUT_MS);
  return run;
}

function conversationIdFromUrl() {
  const match = /#\/c\/([^/?#]+)$/.exec(page.url());
  assert.ok(match, `expected a #/c/<id> route, got ${page.url()}`);
  return decodeURIComponent(match[1]);
}

async function runIdOfLastUserMessage(conversationId) {
  const conversation = await getJson(`/api/conversations/${conversationId}`);
  const users = conversation.messages.filter((m) => m.role === 'user');
  const last = users[users.length - 1];
  assert.ok(last?.run_id, 'the last user message has a run');
  return last.run_id;
}

/**
 * The rendered answer drops markdown syntax (and list numbers, link targets, code fence
 * languages) but keeps the words: its letters must appear, in order, among the letters of
 * the stored markdown, and cover most of them.
 */
function assertRenderedFrom(rendered, markdown) {
  const letters = (text) => [...(text ?? '').normalize('NFC')].filter((char) => /\p{L}/u.test(char)).join('');
  const shown = letters(rendered);
  const stored = letters(markdown);
  let index = 0;
  for (const char of stored) {
    if (index < shown.length && shown[index] === char) index += 1;
  }
  assert.equal(index, shown.length, `rendered text is not drawn from the stored answer:\n${rendered}\n---\n${markdown}`);
  assert.ok(shown.length >= stored.length * 0.6, `rendered text covers too little of the stored answer:\n${rendered}\n---\n${markdown}`);
}

function assertNoBrowserErrors() {
  assert.deepEqual(pageErrors, [], 'uncaught errors in the page');
  assert.deepEqual(consoleErrors, [], 'console errors or CSP violations');
}
