// Browser tests of how the web UI shows the chat agent's run events, against the in-memory
// mock server's scripted scenarios: route and mode chips, tool calls in the answer and the
// run timeline, citation markers that open the cited passage (live and after a reload), fact
// cards with their safety fields, confirmation cards (confirm, reject, 403, 409, 422, and the
// decided status after a reload), clarification questions, degraded notices, HTML in event
// fields staying inert, and the Chinese labels. Needs only Chromium:
//
//   node tests/browser/agent.test.mjs        (CHROMIUM, WARDEN_ARTIFACTS optional)

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startMockServer } from './mock-server.mjs';

const TIMEOUT_MS = 20_000;
const POLL_INTERVAL_MS = 100;
const ADMIN = { name: 'alice', password: 'correct-horse' };
const VIEWER = { name: 'vera', password: 'viewer-horse' };
const OPERATOR = { name: 'otto', password: 'operator-horse' };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const artifacts = join(process.env.WARDEN_ARTIFACTS || 'tests/artifacts/browser', 'agent');

let browser;
let mock;
const problems = [];

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  // Chaos drops streams and replays events twice: no card, step or passage may show twice.
  mock = await startMockServer({ chaos: true, user: ADMIN.name, password: ADMIN.password });
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

test('route chips, tool steps and the timeline show what the agent did', async () => {
  const page = await signedInPage();
  try {
    // Slowly, to see the tool call while it runs.
    const answer = await ask(page, '[[kb]] [[slow]] How do I free space on a full disk?', {
      whileLive: async (live) => {
        await live.locator('[data-testid="tool-step"][data-status="running"]').waitFor();
        await expectText(live.getByTestId('tool-step'), 'running…');
        await expectText(live.getByTestId('run-status'), 'Using kb_search…');
        await expectText(live.getByTestId('route-intent'), 'knowledge question');
        await page.screenshot({ path: join(artifacts, 'tool-running.png') });
      },
    });
    await expectText(answer.getByTestId('route-intent'), 'knowledge question');
    await expectText(answer.getByTestId('route-mode'), 'bounded ReAct');
    await expectText(answer.getByTestId('route-source'), 'by classifier · 82%');
    const step = answer.getByTestId('tool-step');
    assert.equal(await step.count(), 1);
    assert.equal(await step.getAttribute('data-status'), 'ok');
    await expectText(step, 'kb_search');
    await expectText(step, '2 passages from ops-runbooks');

    await answer.getByTestId('timeline-toggle').click();
    const timeline = answer.getByTestId('timeline');
    await expectText(timeline, 'route.decided');
    await expectText(timeline, 'knowledge_question · bounded_react (classifier 82%)');
    await expectText(timeline, 'tool.started');
    await expectText(timeline, 'kb_search: ok — 2 passages from ops-runbooks');
    await expectText(timeline, 'citation');
    await expectText(timeline, 'answered');

    // A direct read by rule, and the same chips for a stored answer after a reload.
    const incident = await ask(page, '[[incident]] What is INC-1042?');
    await expectText(incident.getByTestId('route-intent'), 'incident query');
    await expectText(incident.getByTestId('route-mode'), 'direct read');
    await expectText(incident.getByTestId('route-source'), 'by rule');
    await expectText(incident.getByTestId('route-incident'), 'INC-1042');
    await page.reload();
    const answers = assistantAnswers(page);
    await expectText(answers.nth(0).getByTestId('route-mode'), 'bounded ReAct');
    await expectText(answers.nth(1).getByTestId('route-mode'), 'direct read');
    await expectText(answers.nth(1).getByTestId('tool-step'), 'get_incident');
    await answers.nth(1).getByTestId('timeline-toggle').click();
    await expectText(answers.nth(1).getByTestId('timeline'), 'get_incident: ok — INC-1042 (firing)');
    await page.screenshot({ path: join(artifacts, 'route-and-tools.png') });
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('citation markers open the cited passage, live and after a reload', async () => {
  const page = await signedInPage();
  try {
    const answer = await ask(page, '[[kb]] My disk is full.');
    const refs = answer.getByTestId('citation-ref');
    await waitUntil('both markers are links', async () => (await refs.count()) === 2);
    // [7] names no cited passage: it stays text.
    await expectText(answer.getByTestId('message-body'), '[7]');
    await expectText(answer.getByTestId('sources'), 'When a disk is full');
    assert.equal(await answer.getByTestId('source-item').count(), 2);

    await refs.first().click();
    const panel = answer.getByTestId('citation-panel');
    await expectText(panel.getByTestId('citation-title'), 'When a disk is full');
    await expectText(panel, 'ops-runbooks');
    await expectText(panel, 'disk/full-disk.md');
    await expectText(panel, 'Disk › When a disk is full › First checks');
    await expectText(panel, '12–24');
    await expectText(panel.getByTestId('citation-text'), 'df -i');
    assert.equal(await refs.first().getAttribute('aria-expanded'), 'true');
    await page.screenshot({ path: join(artifacts, 'citation-open.png') });

    await answer.getByTestId('source-item').nth(1).click();
    await expectText(panel.getByTestId('citation-title'), 'Journald retention');
    await expectText(panel, 'Pages');
    await expectText(panel.getByTestId('citation-text'), 'vacuum-size=500M');
    await panel.getByTestId('citation-close').click();
    await panel.waitFor({ state: 'hidden' });

    // History: the stored message's citations make the same markers.
    await page.reload();
    const stored = assistantAnswers(page).first();
    await waitUntil('the stored markers are links', async () => (await stored.getByTestId('citation-ref').count()) === 2);
    await stored.getByTestId('citation-ref').nth(1).click();
    await expectText(stored.getByTestId('citation-panel').getByTestId('citation-title'), 'Journald retention');
    await page.screenshot({ path: join(artifacts, 'citation-after-reload.png') });
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('an extractive or abstaining answer says so in a line above it', async () => {
  const page = await signedInPage();
  try {
    const quoted = await ask(page, '[[extractive]] What should I check first on a full disk?');
    const basis = quoted.getByTestId('answer-basis');
    await expectText(basis, 'Quoted from the knowledge base');
    assert.equal(await basis.getAttribute('data-basis'), 'extractive');
    // The line stands above the answer's text.
    const above = await page.evaluate(([line, body]) => Boolean(line.compareDocumentPosition(body) & Node.DOCUMENT_POSITION_FOLLOWING),
      [await basis.elementHandle(), await quoted.getByTestId('message-body').elementHandle()]);
    assert.ok(above, 'the basis line is above the answer text');
    await quoted.getByTestId('timeline-toggle').click();
    await expectText(quoted.getByTestId('timeline'), 'answer.unsupported');
    await expectText(quoted.getByTestId('timeline'), 'not supported by the passages');
    const none = await ask(page, '[[abstain]] What is the default Redis maxmemory policy?', { newChat: false });
    await expectText(none.getByTestId('answer-basis'), 'Not found');
    assert.equal(await none.getByTestId('source-item').count(), 0);
    // After a reload (events replayed) and in Chinese.
    await page.reload();
    const answers = assistantAnswers(page);
    await expectText(answers.nth(0).getByTestId('answer-basis'), 'Quoted from the knowledge base');
    await page.getByTestId('lang-toggle').click();
    await expectText(answers.nth(0).getByTestId('answer-basis'), '摘自知识库');
    await expectText(answers.nth(1).getByTestId('answer-basis'), '未找到');
    await page.screenshot({ path: join(artifacts, 'answer-basis-zh.png') });
    await page.getByTestId('lang-toggle').click();
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('HTML in citation and card fields stays inert text', async () => {
  const page = await signedInPage();
  try {
    const cited = await ask(page, '[[kb]] [[xss]] Cite something hostile.');
    await waitUntil('the marker is a link', async () => (await cited.getByTestId('citation-ref').count()) === 2);
    await cited.getByTestId('citation-ref').first().click();
    const panel = cited.getByTestId('citation-panel');
    await expectText(panel.getByTestId('citation-title'), '<img src=x onerror="window.__xss=1">');
    await expectText(panel.getByTestId('citation-text'), '<script>window.__xss=2</script>');
    const card = await ask(page, '[[incident]] [[xss]] Show a hostile incident.');
    await expectText(card.getByTestId('card-title'), '<img src=x onerror=');
    await expectText(card.getByTestId('card'), 'Service');
    const report = await ask(page, '[[report]] [[xss]] And a hostile report.');
    await expectText(report.getByTestId('safety'), '<img src=x onerror=');
    const action = await ask(page, '[[diagnose]] [[xss]] And a hostile action.');
    await expectText(action.getByTestId('confirmation'), '<img src=x onerror=');
    await page.waitForTimeout(300);
    await assertInert(page);
    await page.reload();
    await expectText(assistantAnswers(page).nth(1).getByTestId('card-title'), '<img src=x onerror=');
    await expectText(assistantAnswers(page).nth(3).getByTestId('confirmation'), '<img src=x onerror=');
    await assistantAnswers(page).first().getByTestId('citation-ref').first().click();
    await expectText(assistantAnswers(page).first().getByTestId('citation-text'), '<script>');
    await assertInert(page);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('incident, incident list, diagnostic report and not-found cards', async () => {
  const page = await signedInPage({ viewport: { width: 1100, height: 1700 } });
  try {
    const incident = await ask(page, '[[incident]] [[degraded]] What is INC-1042?');
    const card = incident.getByTestId('card');
    assert.equal(await card.count(), 1, 'one card even when events are replayed');
    assert.equal(await card.getAttribute('data-kind'), 'incident');
    await expectText(card.getByTestId('card-title'), 'Checkout latency above SLO (INC-1042)');
    await expectText(fact(card, 'service'), 'checkout');
    await expectText(fact(card, 'severity'), 'critical');
    await expectText(fact(card, 'status'), 'firing');
    await expectText(fact(card, 'ends_at'), '—');
    await expectText(fact(card, 'labels'), 'payments');
    await expectText(incident.getByTestId('degraded'), 'the explanation model timed out');

    const list = await ask(page, '[[incidents]] List recent incidents.');
    assert.equal(await list.getByTestId('incident-row').count(), 3);
    await expectText(list.getByTestId('card'), 'INC-1041');

    const report = await ask(page, '[[report]] How did diagnostic_7f3a go?');
    const safety = report.getByTestId('safety');
    await expectText(fact(report.getByTestId('card'), 'component'), 'checkout-db');
    await expectText(fact(safety, 'recoveryMode'), 'manual');
    await expectText(fact(safety, 'executionPermitted'), 'No');
    await expectText(fact(safety, 'humanApprovalRequired'), 'Yes');
    await expectText(fact(safety, 'validatorStatus'), 'passed');
    await expectText(fact(safety, 'evidenceIds'), 'ev_logs_4');
    assert.ok(await safety.isVisible());
    await expectText(report.getByTestId('route-diagnostic'), 'diagnostic_7f3a');

    const missing = await ask(page, '[[missing]] Show INC-9999.');
    await expectText(missing.getByTestId('not-found'), 'No incident with id INC-9999.');
    assert.equal(await missing.getByTestId('tool-step').getAttribute('data-status'), 'error');
    await page.screenshot({ path: join(artifacts, 'cards.png') });
    await report.screenshot({ path: join(artifacts, 'diagnostic-report.png') });

    await page.reload();
    await expectText(assistantAnswers(page).nth(2).getByTestId('safety'), 'Human approval required');
    await expectText(assistantAnswers(page).nth(0).getByTestId('degraded'), 'timed out');
    assert.equal(await assistantAnswers(page).nth(0).getByTestId('card').count(), 1);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('confirming a diagnostic start shows its task, and a reload shows it decided', async () => {
  const page = await signedInPage();
  try {
    const answer = await ask(page, '[[diagnose]] Diagnose INC-1042.');
    const card = answer.getByTestId('confirmation');
    await expectText(card, 'Start a diagnostic');
    await expectText(card, 'INC-1042');
    await expectText(card, 'You asked to diagnose INC-1042.');
    const actionId = await card.getAttribute('data-action-id');
    const action = mock.state.actions.get(actionId);
    assert.equal(await card.getByTestId('confirmation-params').textContent(), JSON.stringify(action.parameters, null, 2));
    assert.equal(await card.getAttribute('data-status'), 'pending');
    await page.screenshot({ path: join(artifacts, 'confirmation-pending.png') });

    mock.state.actionDelayMs = 800;
    try {
      await card.getByTestId('confirm').click();
      await expectText(card.getByTestId('confirmation-result'), 'Confirming…');
      assert.ok(await card.getByTestId('confirm').isDisabled());
      assert.ok(await card.getByTestId('reject').isDisabled());
    } finally {
      mock.state.actionDelayMs = 0;
    }
    await expectText(card.getByTestId('confirmation-result'), `Diagnostic task ${action.result?.diagnostic_task_id ?? 'diagnostic_'}`);
    await expectText(card.getByTestId('confirmation-result'), action.result.diagnostic_task_id);
    assert.equal(await card.getAttribute('data-status'), 'executed');
    assert.equal(await card.getByTestId('confirm').isVisible(), false);
    const decisions = mock.state.decisions.filter((d) => d.actionId === actionId);
    assert.deepEqual(decisions.map((d) => [d.decision, d.status]), [['confirm', 200]]);
    assert.match(decisions[0].key, UUID);
    await page.screenshot({ path: join(artifacts, 'confirmation-executed.png') });

    await page.reload();
    const reloaded = assistantAnswers(page).first().getByTestId('confirmation');
    await waitUntil('the reloaded card shows the decision', async () => (await reloaded.getAttribute('data-status')) === 'executed');
    await expectText(reloaded.getByTestId('confirmation-result'), action.result.diagnostic_task_id);
    await expectText(reloaded.getByTestId('confirmation-status'), 'executed');
    assert.equal(await reloaded.getByTestId('confirm').isVisible(), false);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('reject, and the answers to a decided (409) or changed (422) action', async () => {
  const page = await signedInPage();
  try {
    const first = (await ask(page, '[[diagnose]] Diagnose INC-1042.')).getByTestId('confirmation');
    await first.getByTestId('reject').click();
    await expectText(first.getByTestId('confirmation-result'), 'Rejected. Nothing was done.');
    assert.equal(await first.getAttribute('data-status'), 'rejected');

    // Decided elsewhere (another tab) after this page drew the card: 409, then its status.
    const second = (await ask(page, '[[diagnose]] Diagnose it again.')).getByTestId('confirmation');
    const secondAction = mock.state.actions.get(await second.getAttribute('data-action-id'));
    secondAction.status = 'rejected';
    await second.getByTestId('confirm').click();
    await expectText(second.getByTestId('confirmation-error'), 'Already decided, expired or being decided');
    await expectText(second.getByTestId('confirmation-error'), 'already rejected');
    await waitUntil('the card shows the status it has now', async () => (await second.getAttribute('data-status')) === 'rejected');
    await page.screenshot({ path: join(artifacts, 'confirmation-409.png') });

    const third = (await ask(page, '[[diagnose]] And once more.')).getByTestId('confirmation');
    const thirdAction = mock.state.actions.get(await third.getAttribute('data-action-id'));
    thirdAction.parameters_hash = 'changed';
    await third.getByTestId('confirm').click();
    await expectText(third.getByTestId('confirmation-error'), 'The parameters changed');
    assert.equal(await third.getAttribute('data-status'), 'pending');
    assert.equal(thirdAction.status, 'pending');

    await page.reload();
    const cards = page.getByTestId('confirmation');
    await waitUntil('reloaded cards show their status', async () => (await cards.nth(0).getAttribute('data-status')) === 'rejected'
      && (await cards.nth(1).getAttribute('data-status')) === 'rejected'
      && (await cards.nth(2).getAttribute('data-status')) === 'pending');
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('a viewer cannot approve a recovery but may reject it', async () => {
  const page = await signedInPage({}, VIEWER);
  try {
    const answer = await ask(page, '[[recover]] Restart the pooler.');
    await expectText(answer.getByTestId('route-intent'), 'recovery request');
    await expectText(answer.getByTestId('route-mode'), 'needs confirmation');
    const card = answer.getByTestId('confirmation');
    await expectText(card, 'Approve a recovery');
    await expectText(card.getByTestId('confirmation-params'), '"step": "restart"');
    await card.getByTestId('confirm').click();
    await expectText(card.getByTestId('confirmation-error'), 'needs an operator or admin');
    assert.equal(await card.getAttribute('data-status'), 'pending');
    assert.ok(await card.getByTestId('reject').isEnabled());
    await page.screenshot({ path: join(artifacts, 'confirmation-403.png') });
    await card.getByTestId('reject').click();
    await expectText(card.getByTestId('confirmation-result'), 'Rejected');
    const actionId = await card.getAttribute('data-action-id');
    const keys = mock.state.decisions.filter((d) => d.actionId === actionId).map((d) => d.key);
    assert.equal(keys.length, 2);
    assert.notEqual(keys[0], keys[1], 'each click sends its own Idempotency-Key');
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('a confirmed recovery waits for a second person, who approves it in the queue', async () => {
  const page = await signedInPage();
  try {
    const card = (await ask(page, '[[recover]] Restart the pooler.')).getByTestId('confirmation');
    await card.getByTestId('confirm').click();
    await expectText(card.getByTestId('confirmation-result'), 'Submitted for approval');
    assert.equal(await card.getAttribute('data-status'), 'awaiting_approval');
    await expectText(card.getByTestId('confirmation-status'), 'awaiting approval');
    // The requester sees their own request in the queue, and cannot approve it.
    await page.goto(`${mock.url}#/diagnostics`);
    const own = page.getByTestId('approval-item').first();
    await expectText(own.getByTestId('approval-own'), 'someone else must approve it');
    assert.equal(await own.getByTestId('approval-approve').isDisabled(), true);
    assertNoProblems();
  } finally {
    await page.close();
  }
  const approver = await signedInPage({}, OPERATOR);
  try {
    await approver.goto(`${mock.url}#/diagnostics`);
    const item = approver.getByTestId('approval-item').first();
    await expectText(item, 'requested by alice');
    await expectText(item.getByTestId('approval-proposal'), 'Restart the checkout-db connection pooler [chg-4127]');
    await expectText(item.getByTestId('approval-root-cause'), 'connection_pool_exhaustion — checkout-db (deploy chg-4127)');
    await approver.screenshot({ path: join(artifacts, 'approval-queue.png') });
    await item.getByTestId('approval-approve').click();
    await expectText(item.getByTestId('approval-outcome'), 'Approved as approval_');
    const decision = mock.state.decisions.find((d) => d.by === 'otto');
    assert.equal(decision?.decision, 'approve');
    assertNoProblems();
  } finally {
    await approver.close();
  }
  // A viewer has no approval queue.
  const viewer = await signedInPage({}, VIEWER);
  try {
    await viewer.goto(`${mock.url}#/diagnostics`);
    await viewer.getByTestId('diag-list').waitFor();
    assert.equal(await viewer.getByTestId('diag-approvals-section').count(), 0);
  } finally {
    await viewer.close();
  }
});

test('a kept original is shown to its author on request, the stored text stays masked', async () => {
  const page = await signedInPage();
  try {
    await page.getByTestId('keep-original').check();
    await ask(page, 'The database password is Hunter2-Secret, why does login fail?');
    await page.reload();
    const mine = page.locator('[data-testid="message"][data-role="user"]').last();
    await expectText(mine.getByTestId('message-body'), '[masked:password]');
    assert.ok(!(await mine.getByTestId('message-body').textContent()).includes('Hunter2-Secret'));
    await mine.getByTestId('show-original').click();
    await expectText(mine.getByTestId('message-original'), 'Hunter2-Secret');
    await mine.getByTestId('show-original').click();
    assert.equal(await mine.getByTestId('message-original').isHidden(), true);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('a clarification question is shown once, distinctly', async () => {
  const page = await signedInPage();
  try {
    const answer = await ask(page, '[[clarify]] What is going on with the incident?');
    const question = answer.getByTestId('clarification');
    await expectText(question, 'Warden needs more detail');
    await expectText(question.getByTestId('clarification-question'), 'Which incident do you mean');
    await expectText(answer.getByTestId('route-mode'), 'clarification');
    await waitUntil('the answer text repeating the question is hidden', async () => !(await answer.getByTestId('message-body').isVisible()));
    await page.screenshot({ path: join(artifacts, 'clarification.png') });
    await page.reload();
    const stored = assistantAnswers(page).first();
    await expectText(stored.getByTestId('clarification-question'), 'Which incident do you mean');
    await waitUntil('the stored answer repeating the question is hidden', async () => !(await stored.getByTestId('message-body').isVisible()));
    assert.equal(await stored.getByTestId('clarification').count(), 1);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('the agent\'s labels in Chinese, and a dark narrow layout', async () => {
  const page = await signedInPage({ viewport: { width: 1100, height: 1500 } });
  try {
    await ask(page, '[[kb]] 磁盘满了怎么办？');
    await ask(page, '[[report]] 诊断结果如何？');
    const action = await ask(page, '[[diagnose]] 诊断 INC-1042');
    await page.getByTestId('lang-toggle').click();
    const answers = assistantAnswers(page);
    await expectText(answers.nth(0).getByTestId('route-intent'), '知识问答');
    await expectText(answers.nth(0).getByTestId('route-mode'), '有界 ReAct');
    await expectText(answers.nth(0).getByTestId('route-source'), '分类器判定');
    await expectText(answers.nth(0).getByTestId('tool-step'), '完成');
    await expectText(answers.nth(0).getByTestId('sources'), '引用来源');
    await answers.nth(0).getByTestId('citation-ref').first().click();
    await expectText(answers.nth(0).getByTestId('citation-panel'), '知识库');
    await expectText(answers.nth(1).getByTestId('safety'), '需要人工批准');
    await expectText(answers.nth(1).getByTestId('safety'), '否');
    await expectText(answers.nth(1).getByTestId('card'), '诊断报告');
    const card = action.getByTestId('confirmation');
    await expectText(card, '发起诊断');
    await expectText(card, '确切参数');
    await expectText(card.getByTestId('confirm'), '确认');
    await expectText(card.getByTestId('reject'), '拒绝');
    await card.getByTestId('reject').click();
    await expectText(card.getByTestId('confirmation-result'), '已拒绝');
    await page.screenshot({ path: join(artifacts, 'agent-zh.png') });
    await page.getByTestId('lang-toggle').click();
    await expectText(card.getByTestId('confirmation-result'), 'Rejected');
    assertNoProblems();
  } finally {
    await page.close();
  }
  const narrow = await signedInPage({ colorScheme: 'dark', viewport: { width: 390, height: 1100 } });
  try {
    await ask(narrow, '[[report]] How did the diagnostic go?', { newChat: false });
    const answer = await ask(narrow, '[[diagnose]] Diagnose INC-1042.', { newChat: false });
    await answer.getByTestId('confirmation').scrollIntoViewIfNeeded();
    await narrow.screenshot({ path: join(artifacts, 'agent-dark-narrow.png') });
    assertNoProblems();
  } finally {
    await narrow.close();
  }
});

// --- Helpers ------------------------------------------------------------------------------------

async function newPage(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, locale: 'en-US', ...options });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT_MS);
  page.on('console', (message) => {
    const text = message.text();
    if (message.type() !== 'error' && !/Content.Security.Policy/i.test(text)) return;
    const url = message.location().url ?? '';
    if (/status of (401|429)/.test(text)) return; // Expected answers to /api/me and bad sign-ins.
    if (/status of (403|409|422)/.test(text) && url.includes('/api/actions/')) return; // Refused decisions, on purpose.
    problems.push(`${text} (${url})`);
  });
  page.on('pageerror', (error) => problems.push(String(error)));
  page.on('close', () => context.close().catch(() => {}));
  await page.exposeBinding('__reportCsp', (_source, text) => problems.push(`CSP violation: ${text}`));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__reportCsp?.(`${event.violatedDirective} blocked ${event.blockedURI || 'inline'}`);
    });
  });
  return page;
}

async function signedInPage(options = {}, account = ADMIN) {
  const page = await newPage(options);
  await page.goto(mock.url);
  await page.getByTestId('login-name').fill(account.name);
  await page.getByTestId('login-password').fill(account.password);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('new-chat').waitFor();
  return page;
}

function assistantAnswers(page) {
  return page.locator('[data-testid="message"][data-role="assistant"]');
}

/**
 * Sends a message (in the open conversation once one is open) and waits until its answer
 * is stored; returns the answer's locator. `whileLive(answer)` runs while it streams.
 */
async function ask(page, text, { newChat = null, whileLive = null } = {}) {
  const answers = assistantAnswers(page);
  const before = await answers.count();
  const startNew = newChat ?? !/#\/c\//.test(page.url());
  if (startNew && (await page.getByTestId('new-chat').isVisible())) await page.getByTestId('new-chat').click();
  await page.getByTestId('composer').fill(text);
  await page.getByTestId('composer').press('Enter');
  const answer = answers.nth(before);
  await answer.waitFor();
  if (whileLive) await whileLive(answer);
  await waitUntil(`the answer to ${JSON.stringify(text)} is stored`, async () =>
    (await answer.getAttribute('data-live')) === null && (await answer.locator('.message-time').count()) === 1);
  return answer;
}

function fact(scope, field) {
  return scope.locator(`.fact[data-field="${field}"] dd`).first();
}

async function assertInert(page) {
  const findings = await page.evaluate(() => ({
    xss: window.__xss,
    images: document.querySelectorAll('img').length,
    scripts: document.querySelectorAll('body script').length,
  }));
  assert.deepEqual(findings, { xss: undefined, images: 0, scripts: 0 });
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

async function waitUntil(what, check, timeoutMs = TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
  assert.fail(`timed out waiting until ${what}`);
}

function assertNoProblems() {
  assert.deepEqual(problems, [], 'console errors, CSP violations or uncaught errors');
}
