// Browser tests of the Diagnostics view against the in-memory mock server's diagnostic
// scenarios (tests/browser/mock-diagnostics.mjs): starting a task on an incident, its live
// node progress, the completed report with every part (verdict, root cause, causal chain,
// hypotheses and the evidence that moved them, recovery, policy, budgets), a reload mid-run
// and dropped streams drawing each step once, a fail-closed report and a failed run, viewers
// and refused starts, the admins' live data sources panel, hostile evidence staying inert, the Chinese labels and the dark narrow
// layout. Needs only Chromium:
//
//   node tests/browser/diagnostics.test.mjs        (CHROMIUM, WARDEN_ARTIFACTS optional)

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { HOSTILE_EVIDENCE } from './mock-diagnostics.mjs';
import { startMockServer } from './mock-server.mjs';

const TIMEOUT_MS = 20_000;
const POLL_INTERVAL_MS = 100;
const ADMIN = { name: 'alice', password: 'correct-horse' };
const OPERATOR = { name: 'otto', password: 'operator-horse' };
const VIEWER = { name: 'vera', password: 'viewer-horse' };
const TALL = { viewport: { width: 1100, height: 2600 } };
const artifacts = join(process.env.WARDEN_ARTIFACTS || 'tests/artifacts/browser', 'diagnostics');

let browser;
let mock;
const problems = [];

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  // Chaos drops every stream after a few events and replays some twice on reconnect.
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

test('starting a diagnostic shows its node progress live, then its report', async () => {
  const page = await signedInPage(TALL);
  mock.state.diagnosticStepMs = 250;
  try {
    await openDiagnostics(page);
    await expectText(page.getByTestId('diag-tasks-status'), 'No diagnostics yet.');
    assert.equal(await page.getByTestId('diag-incident').locator('option').count(), 4);
    assert.equal(await page.getByTestId('diag-incident').inputValue(), 'incident_checkout-db');
    assert.equal(await page.getByTestId('nav-diagnostics').getAttribute('aria-current'), 'page');
    await page.screenshot({ path: join(artifacts, 'list-empty.png') });

    const taskId = await startDiagnosis(page, 'incident_checkout-db');
    assert.match(new URL(page.url()).hash, /^#\/diagnostics\/diagnostic_[0-9a-f]+$/);
    await expectText(page.getByTestId('diag-incident-id'), 'incident_checkout-db');
    const planner = page.locator('[data-testid="diag-step"][data-node="planner"]');
    await planner.waitFor();
    await expectText(page.getByTestId('diag-run-status'), 'Investigating…');
    await expectText(page.getByTestId('diag-status'), 'running');
    assert.equal(await page.getByTestId('diag-report').count(), 0, 'no report while the graph runs');
    await expectText(planner.getByTestId('diag-node-name'), 'Planner');
    await expectText(planner.getByTestId('diag-round'), 'round 1');
    await expectText(planner.getByTestId('diag-step-plan'), 'Changes shortly before the alert');
    await page.screenshot({ path: join(artifacts, 'progress-live.png') });

    await waitForReport(page);
    await expectText(page.getByTestId('diag-run-status'), 'The diagnostic finished.');
    await expectText(page.getByTestId('diag-status'), 'completed');
    await assertStepsOnce(page, taskId);
    const tools = page.locator('[data-testid="diag-step"][data-kind="tool"]');
    assert.equal(await tools.count(), 4);
    await expectText(tools.first(), 'list_changes');
    await expectText(tools.first(), '1 deploy in the window');
    assert.equal(await tools.first().getAttribute('data-status'), 'ok');
    const knowledge = page.locator('[data-testid="diag-step"][data-node="knowledge_investigator"]');
    await expectText(knowledge.getByTestId('diag-node-name'), 'Knowledge investigator');
    await expectText(knowledge.getByTestId('diag-step-hypotheses'), 'Cache eviction storm');
    const gate = page.locator('[data-testid="diag-step"][data-node="sufficiency_gate"][data-iteration="1"]');
    await expectText(gate.getByTestId('diag-round'), 'round 2');
    await expectText(gate.getByTestId('diag-step-summary'), 'H1 needs an impact; H3 is untested');
    await expectText(page.locator('[data-testid="diag-step"][data-node="policy_gate"]').getByTestId('diag-step-policy'), 'No — a person decides');
    await page.screenshot({ path: join(artifacts, 'progress-done.png') });

    await page.getByTestId('diag-back').click();
    const item = page.locator(`[data-testid="diag-task-item"][data-task-id="${taskId}"]`);
    await expectText(item, 'Root cause found');
    await expectText(item, 'completed');
    await expectText(item, 'Connection pool exhausted');
    assertNoProblems();
  } finally {
    mock.state.diagnosticStepMs = 120;
    await page.close();
  }
});

test('the completed report shows the root cause, chain, hypotheses, recovery and policy', async () => {
  const page = await signedInPage(TALL);
  try {
    await openDiagnostics(page);
    await startDiagnosis(page, 'incident_checkout-db');
    const report = await waitForReport(page);
    assert.equal(await report.getAttribute('data-verdict'), 'root_cause');
    await expectText(page.getByTestId('diag-verdict-label'), 'Root cause found');
    await expectText(page.getByTestId('diag-summary'), 'checkout-db ran out of connections');

    await expectText(page.getByTestId('diag-component'), 'checkout-db');
    await expectText(page.getByTestId('diag-mechanism'), 'Connection pool exhausted after deploy chg-4127');
    await expectText(page.getByTestId('diag-trigger'), 'deploy');
    await expectText(page.getByTestId('diag-trigger'), 'chg-4127');
    await expectText(page.getByTestId('diag-confidence'), '86%');

    const links = page.getByTestId('diag-chain-link');
    assert.equal(await links.count(), 3);
    assert.deepEqual(await links.evaluateAll((items) => items.map((item) => item.dataset.role)), ['trigger', 'mechanism', 'impact']);
    await expectText(links.nth(0).getByTestId('diag-chain-role'), 'Trigger');
    await expectText(links.nth(2), 'Requests timed out waiting for a connection');
    const ref = links.nth(1).getByTestId('diag-evidence-ref');
    await expectText(ref, 'ev_metrics_2');
    await ref.click();
    const panel = page.getByTestId('diag-evidence-panel');
    await expectText(panel.getByTestId('diag-evidence-id'), 'ev_metrics_2');
    await expectText(panel.getByTestId('diag-evidence-raw'), 'pg_pool_active{db="checkout"} 100/100');
    await expectText(panel.getByTestId('diag-evidence-summary'), 'saturated at 100/100');
    await expectText(panel, 'prometheus');
    assert.equal(await ref.getAttribute('aria-expanded'), 'true');
    await page.screenshot({ path: join(artifacts, 'evidence-open.png') });
    await panel.getByTestId('diag-evidence-close').click();
    await panel.waitFor({ state: 'hidden' });
    assert.equal(await ref.getAttribute('aria-expanded'), 'false');

    const rows = page.getByTestId('diag-hypothesis');
    assert.equal(await rows.count(), 4);
    assert.deepEqual(await rows.evaluateAll((items) => items.map((item) => item.dataset.disposition)),
      ['supported', 'refuted', 'causally_inactive', 'unresolved']);
    await expectText(rows.nth(2).getByTestId('diag-disposition'), 'causally inactive');
    await expectText(rows.nth(0), 'The pool saturated right after the deploy');
    const supports = rows.nth(0).locator('[data-testid="diag-moved-by"][data-effect="supports"]');
    await expectText(supports, 'Supports');
    assert.equal(await supports.getByTestId('diag-evidence-ref').count(), 3);
    await expectText(supports, 'Mechanism');
    await expectText(rows.nth(0).getByTestId('diag-finding').nth(0), 'Deploy chg-4127 doubled the workers');
    const refutes = rows.nth(1).locator('[data-testid="diag-moved-by"][data-effect="refutes"]');
    await expectText(refutes, 'ev_locks_4');
    await expectText(refutes, 'Context');
    await expectText(rows.nth(2).locator('[data-testid="diag-moved-by"][data-effect="inactivates"]'), 'ev_net_5');
    await expectText(rows.nth(3), 'No evidence moved it.');
    await rows.nth(2).getByTestId('diag-evidence-ref').click();
    await expectText(panel.getByTestId('diag-evidence-raw'), 'node_network_drop_total');
    await expectText(panel, 'Inside the incident window');

    const recovery = page.getByTestId('diag-recovery');
    await expectText(recovery.getByTestId('diag-recovery-mode'), 'proposal only');
    await expectText(recovery.getByTestId('diag-proposal-summary'), 'Roll back chg-4127');
    await expectText(recovery.getByTestId('diag-change-ref'), 'chg-4127');
    await expectText(recovery.getByTestId('diag-recovery-reason'), 'a rollback needs a person to approve it');

    const policy = page.getByTestId('diag-policy');
    assert.equal(await policy.getByTestId('diag-execution').getAttribute('data-permitted'), 'false');
    await expectText(policy.getByTestId('diag-execution-value'), 'No — a person decides');
    await expectText(policy.getByTestId('diag-policy-reason'), 'Warden never executes a recovery');
    await expectText(policy.getByTestId('diag-validation-origin'), 'validated by the model');
    await expectText(policy.getByTestId('diag-validator-status'), 'valid');
    assert.equal(await page.getByTestId('diag-failures').count(), 0);

    const budgets = page.getByTestId('diag-budgets');
    await expectText(budgets.locator('[data-budget="toolCalls"]'), '4');
    await expectText(budgets.locator('[data-budget="elapsedMs"]'), '8.4 s');
    await page.getByTestId('diag-plan').locator('summary').click();
    assert.equal(await page.getByTestId('diag-plan-step').count(), 4);
    await page.screenshot({ path: join(artifacts, 'report.png'), fullPage: true });

    // A reload draws the same stored report.
    await page.reload();
    await waitForReport(page);
    await expectText(page.getByTestId('diag-execution-value'), 'No — a person decides');
    assert.equal(await page.getByTestId('diag-hypothesis').count(), 4);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('a reload mid-run and dropped streams draw every step exactly once', async () => {
  const page = await signedInPage();
  mock.state.diagnosticStepMs = 300;
  try {
    await openDiagnostics(page);
    const taskId = await startDiagnosis(page, 'incident_checkout-db');
    const steps = page.getByTestId('diag-step');
    await waitUntil('several steps are drawn', async () => (await steps.count()) >= 6);
    await page.reload();
    await page.getByTestId('diag-task').waitFor();
    await waitUntil('the replayed steps are drawn', async () => (await steps.count()) >= 6);
    assert.equal(await page.getByTestId('diag-report').count(), 0, 'still running after the reload');
    await expectText(page.getByTestId('diag-run-status'), /Investigating|reconnecting/);
    await assertStepsOnce(page, taskId, { finished: false });
    await page.screenshot({ path: join(artifacts, 'reloaded-mid-run.png') });
    await waitForReport(page);
    await assertStepsOnce(page, taskId);
    const run = mock.state.runs.get(Number(mock.state.diagnostics.get(taskId).run_id));
    assert.ok(run.connections >= 3, `the stream was dropped and followed again (${run.connections} connections)`);
    assertNoProblems();
  } finally {
    mock.state.diagnosticStepMs = 120;
    await page.close();
  }
});

test('a fail-closed report lists its failures and asks for a manual review; a failed run says why', async () => {
  const page = await signedInPage(TALL);
  try {
    await openDiagnostics(page);
    await startDiagnosis(page, 'incident_search-lag');
    const report = await waitForReport(page);
    assert.equal(await report.getAttribute('data-verdict'), 'insufficient_evidence');
    await expectText(page.getByTestId('diag-verdict-label'), 'Insufficient evidence');
    assert.equal(await page.getByTestId('diag-root-cause').count(), 0);
    await expectText(page.getByTestId('diag-chain'), 'No causal chain');
    assert.deepEqual(await page.getByTestId('diag-hypothesis').evaluateAll((items) => items.map((item) => item.dataset.disposition)),
      ['unresolved', 'unresolved']);
    await expectText(page.getByTestId('diag-recovery-mode'), 'manual review');
    await expectText(page.getByTestId('diag-no-proposal'), 'No recovery is proposed.');
    await expectText(page.getByTestId('diag-execution-value'), 'No — a person decides');
    await expectText(page.getByTestId('diag-policy-reason'), 'Insufficient evidence');
    await expectText(page.getByTestId('diag-validator-status'), 'unavailable');
    assert.match(await page.getByTestId('diag-validator-status').getAttribute('class'), /flag-alert/);
    await expectText(page.getByTestId('diag-problems'), 'no supported hypothesis');
    const failures = page.getByTestId('diag-failure');
    assert.equal(await failures.count(), 3);
    assert.deepEqual(await failures.evaluateAll((items) => items.map((item) => [item.dataset.stage, item.dataset.class])),
      [['planner', 'bad_json'], ['executor', 'tool_error'], ['llm_validator', 'unavailable']]);
    await expectText(failures.nth(0), 'Planner');
    await expectText(failures.nth(2), 'qwen2.5-7b-instruct');
    const failedTool = page.locator('[data-testid="diag-step"][data-kind="tool"][data-status="error"]');
    await expectText(failedTool, 'search_logs');
    await expectText(failedTool, 'the log store did not answer');
    await expectText(page.locator('[data-testid="diag-step"][data-node="manual_review"]').getByTestId('diag-step-recovery'), 'manual review');
    await page.screenshot({ path: join(artifacts, 'fail-closed.png'), fullPage: true });

    await page.getByTestId('diag-back').click();
    await startDiagnosis(page, 'incident_graph-crash');
    await expectText(page.getByTestId('diag-run-status'), 'The diagnostic failed: the diagnostic worker stopped (mock failure)');
    await expectText(page.getByTestId('diag-status'), 'failed');
    assert.equal(await page.getByTestId('diag-report').count(), 0);
    assert.equal(await page.locator('[data-testid="diag-step"][data-node="planner"]').count(), 1);
    await page.screenshot({ path: join(artifacts, 'run-failed.png') });
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('viewers cannot start a diagnostic, and a refused start says why', async () => {
  const viewer = await signedInPage({}, VIEWER);
  try {
    await openDiagnostics(viewer);
    await expectText(viewer.getByTestId('diag-start-note'), 'Viewers can read diagnostics but not start them');
    await waitUntil('the incidents are listed', async () => (await viewer.getByTestId('diag-incident').locator('option').count()) === 4);
    assert.ok(await viewer.getByTestId('diag-start').isDisabled());
    assert.ok(await viewer.getByTestId('diag-incident').isDisabled());
    assert.equal(await viewer.getByTestId('diag-start').getAttribute('aria-describedby'), await viewer.getByTestId('diag-start-note').getAttribute('id'));
    await viewer.screenshot({ path: join(artifacts, 'viewer-cannot-start.png') });
    const status = await viewer.evaluate(async () => {
      const csrf = document.cookie.split('; ').find((part) => part.startsWith('warden_csrf='))?.split('=')[1];
      const response = await fetch('/api/diagnostics', {
        method: 'POST', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf }, body: JSON.stringify({ incident_id: 'incident_checkout-db' }),
      });
      return response.status;
    });
    assert.equal(status, 403);
    // Another user's task reads as missing.
    const othersTask = [...mock.state.diagnostics.values()].find((task) => task.ownerId !== mock.state.users.find((u) => u.name === VIEWER.name).id);
    assert.ok(othersTask, 'an earlier test started a task');
    await viewer.evaluate((id) => { window.location.hash = `#/diagnostics/${id}`; }, othersTask.id);
    await expectText(viewer.getByTestId('diag-task-status'), 'This diagnostic does not exist, or you cannot see it.');
    await viewer.screenshot({ path: join(artifacts, 'viewer-others-task.png') });
  } finally {
    await viewer.close();
  }

  const operator = await signedInPage({}, OPERATOR);
  const account = mock.state.users.find((user) => user.name === OPERATOR.name);
  try {
    await openDiagnostics(operator);
    await waitUntil('Diagnose is enabled', async () => operator.getByTestId('diag-start').isEnabled());
    assert.equal(await operator.getByTestId('diag-start-note').isVisible(), false);
    // The role changed on the server after the page was drawn: 403, said plainly.
    account.role = 'viewer';
    await operator.getByTestId('diag-start').click();
    await expectText(operator.getByTestId('diag-start-error'), 'Not allowed: starting a diagnostic needs an operator or admin.');
    assert.match(new URL(operator.url()).hash, /^#\/diagnostics$/);
    await operator.screenshot({ path: join(artifacts, 'start-403.png') });
    account.role = 'operator';
    // The incident went away after the page listed it: 404.
    const incidents = mock.state.incidents;
    mock.state.incidents = incidents.filter((incident) => incident.id !== 'incident_checkout-db');
    try {
      await operator.getByTestId('diag-start').click();
      await expectText(operator.getByTestId('diag-start-error'), 'This incident does not exist any more.');
    } finally {
      mock.state.incidents = incidents;
    }
    await operator.getByTestId('diag-start').click();
    await operator.getByTestId('diag-task').waitFor();
    await waitForReport(operator);
    assertNoProblems();
  } finally {
    account.role = 'operator';
    await operator.close();
  }
});

test('admins see the live data sources and their health; others do not see the panel', async () => {
  const page = await signedInPage(TALL);
  try {
    await openDiagnostics(page);
    await expectText(page.getByTestId('diag-sources-status'), 'No live source is configured');
    mock.state.sources = [
      { name: 'pg-orders', kind: 'postgres', ok: true, detail: 'connected; reads pg_stat_activity; a write was refused (read-only)',
        provides: ['lock_waits', 'transactions', 'slow_queries', 'pg_log'], services: ['orders-service'] },
      { name: 'app-logs', kind: 'log_file', ok: false, detail: '<img src=x onerror=alert(1)> No such file',
        provides: ['app_log'], services: [] },
    ];
    await page.reload();
    await page.getByTestId('diag-start-form').waitFor();
    await waitUntil('both sources are listed', async () => (await page.getByTestId('source-item').count()) === 2);
    const health = await page.getByTestId('source-health').allTextContents();
    assert.deepEqual(health, ['healthy', 'unavailable']);
    await expectText(page.getByTestId('source-detail').first(), 'a write was refused (read-only)');
    await expectText(page.getByTestId('source-detail').nth(1), '<img src=x onerror=alert(1)> No such file');
    assert.equal(await page.locator('[data-testid="diag-sources"] img').count(), 0);
    await expectText(page.getByTestId('diag-sources'), 'every service');
    await page.screenshot({ path: join(artifacts, 'sources.png') });
  } finally {
    mock.state.sources = [];
    await page.close();
  }
  const operator = await signedInPage({}, OPERATOR);
  try {
    await openDiagnostics(operator);
    await operator.getByTestId('diag-list').waitFor();
    assert.equal(await operator.getByTestId('diag-sources-section').count(), 0);
  } finally {
    await operator.close();
  }
});

test('hostile text in incidents, steps and evidence stays inert', async () => {
  const page = await signedInPage(TALL);
  try {
    await openDiagnostics(page);
    await waitUntil('the incidents are listed', async () => (await page.getByTestId('diag-incident').locator('option').count()) === 4);
    const option = page.getByTestId('diag-incident').locator('option[value="incident_xss-probe"]');
    assert.ok((await option.textContent()).includes(HOSTILE_EVIDENCE));
    await startDiagnosis(page, 'incident_xss-probe');
    await waitForReport(page);
    await expectText(page.locator('[data-testid="diag-step"][data-node="knowledge_investigator"]').getByTestId('diag-step-summary'), HOSTILE_EVIDENCE);
    await expectText(page.getByTestId('diag-summary'), HOSTILE_EVIDENCE);
    await expectText(page.getByTestId('diag-hypothesis').first(), HOSTILE_EVIDENCE);
    await expectText(page.getByTestId('diag-proposal-summary'), HOSTILE_EVIDENCE);
    const impact = page.locator('[data-testid="diag-chain-link"][data-role="impact"]');
    await expectText(impact, HOSTILE_EVIDENCE);
    await impact.getByTestId('diag-evidence-ref').click();
    assert.equal(await page.getByTestId('diag-evidence-raw').textContent(), HOSTILE_EVIDENCE);
    await page.waitForTimeout(300);
    await assertInert(page);
    await page.screenshot({ path: join(artifacts, 'hostile.png') });
    await page.reload();
    await waitForReport(page);
    await page.locator('[data-testid="diag-chain-link"][data-role="impact"]').getByTestId('diag-evidence-ref').click();
    assert.equal(await page.getByTestId('diag-evidence-raw').textContent(), HOSTILE_EVIDENCE);
    await assertInert(page);
    assertNoProblems();
  } finally {
    await page.close();
  }
});

test('Chinese labels, and the dark narrow layout', async () => {
  const page = await signedInPage(TALL);
  try {
    await openDiagnostics(page);
    await page.getByTestId('lang-toggle').click();
    await expectText(page.getByTestId('diag-start'), '开始诊断');
    await expectText(page.getByTestId('nav-diagnostics'), '诊断');
    await startDiagnosis(page, 'incident_checkout-db');
    await waitForReport(page);
    await expectText(page.locator('[data-testid="diag-step"][data-node="knowledge_investigator"]').getByTestId('diag-node-name'), '知识调查');
    await expectText(page.getByTestId('diag-round').first(), '第 1 轮');
    await expectText(page.getByTestId('diag-verdict-label'), '已找到根因');
    await expectText(page.getByTestId('diag-execution-value'), '否 — 由人决定');
    await expectText(page.getByTestId('diag-chain-role').first(), '触发');
    await expectText(page.getByTestId('diag-hypothesis').nth(2).getByTestId('diag-disposition'), '未起因果作用');
    await expectText(page.getByTestId('diag-recovery-mode'), '仅建议');
    await expectText(page.getByTestId('diag-policy'), '校验来源');
    await expectText(page.getByTestId('diag-run-status'), '诊断已完成。');
    await page.screenshot({ path: join(artifacts, 'report-zh.png'), fullPage: true });
    await page.getByTestId('lang-toggle').click();
    await expectText(page.getByTestId('diag-execution-value'), 'No — a person decides');
    await expectText(page.getByTestId('diag-verdict-label'), 'Root cause found');
    assertNoProblems();
  } finally {
    await page.close();
  }

  const narrow = await signedInPage({ colorScheme: 'dark', viewport: { width: 390, height: 900 } });
  try {
    await narrow.locator('.menu-button').click();
    await narrow.getByTestId('nav-diagnostics').click();
    await narrow.getByTestId('diag-start-form').waitFor();
    assert.equal(await narrow.evaluate(() => document.body.classList.contains('menu-open')), false, 'the menu closes on navigation');
    await waitUntil('Diagnose is enabled', async () => narrow.getByTestId('diag-start').isEnabled());
    await assertFitsWidth(narrow);
    assert.ok(await narrow.getByTestId('diag-start').isVisible());
    await narrow.screenshot({ path: join(artifacts, 'list-dark-narrow.png') });
    await startDiagnosis(narrow, 'incident_search-lag');
    await waitForReport(narrow);
    await narrow.getByTestId('diag-evidence-ref').first().click();
    await assertFitsWidth(narrow);
    await narrow.getByTestId('diag-policy').scrollIntoViewIfNeeded();
    await narrow.screenshot({ path: join(artifacts, 'report-dark-narrow.png') });
    await narrow.getByTestId('diag-hypotheses').scrollIntoViewIfNeeded();
    await narrow.screenshot({ path: join(artifacts, 'hypotheses-dark-narrow.png') });
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
    if (/status of 401/.test(text)) return; // The expected answer to /api/me before sign-in.
    if (/status of (403|404)/.test(text) && url.includes('/api/diagnostics')) return; // Refused starts and others' tasks, on purpose.
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

async function openDiagnostics(page) {
  await page.getByTestId('nav-diagnostics').click();
  await page.getByTestId('diag-start-form').waitFor();
  assert.equal(new URL(page.url()).hash, '#/diagnostics');
}

/** Picks the incident, presses Diagnose, and waits for the task's page; returns the task id. */
async function startDiagnosis(page, incidentId) {
  const select = page.getByTestId('diag-incident');
  await waitUntil('the incident can be picked', async () => (await select.locator(`option[value="${incidentId}"]`).count()) === 1 && select.isEnabled());
  await select.selectOption(incidentId);
  await page.getByTestId('diag-start').click();
  const header = page.getByTestId('diag-task');
  await header.waitFor();
  return header.getAttribute('data-task-id');
}

async function waitForReport(page) {
  const report = page.getByTestId('diag-report');
  await report.waitFor({ state: 'visible', timeout: TIMEOUT_MS });
  return report;
}

/**
 * Each node step (node, round) and each tool call is drawn once; when the run finished, as
 * many steps as the run has node events and as many tool rows as tool calls.
 */
async function assertStepsOnce(page, taskId, { finished = true } = {}) {
  const keys = await page.getByTestId('diag-step').evaluateAll((items) => items.map((item) =>
    (item.dataset.kind === 'node' ? `${item.dataset.node}#${item.dataset.iteration}` : `${item.dataset.kind}:${item.dataset.callId ?? ''}`)));
  assert.equal(new Set(keys).size, keys.length, `no step twice: ${keys.join(', ')}`);
  if (!finished) return;
  const task = mock.state.diagnostics.get(taskId);
  const events = mock.state.runs.get(Number(task.run_id)).events;
  const nodeEvents = events.filter((event) => event.type === 'diagnostic.node').length;
  const toolCalls = events.filter((event) => event.type === 'tool.started').length;
  assert.equal(keys.filter((key) => key.includes('#')).length, nodeEvents);
  assert.equal(keys.filter((key) => key.startsWith('tool:')).length, toolCalls);
}

/** Nothing in the view is wider than the window: no sideways scrolling, no clipped controls. */
async function assertFitsWidth(page) {
  const overflow = await page.evaluate(() => {
    const view = document.querySelector('[data-testid="diagnostics"]');
    const right = view.getBoundingClientRect().right;
    const sticking = [...view.querySelectorAll('*')].filter((element) => element.getBoundingClientRect().right > right + 1)
      .map((element) => element.dataset.testid ?? element.className ?? element.tagName);
    return { scroll: view.scrollWidth, client: view.clientWidth, page: document.documentElement.scrollWidth, width: window.innerWidth, sticking };
  });
  assert.ok(overflow.scroll <= overflow.client && overflow.page <= overflow.width && overflow.sticking.length === 0,
    `the view fits the window: ${JSON.stringify(overflow)}`);
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
