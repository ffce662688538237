// Browser tests of the memory panel of a conversation, against the in-memory mock server's
// memory routes (mock-memory.mjs): the toggle only with a conversation open, items grouped by
// kind with their trust badges, hostile item text staying inert, Confirm on an item the user
// stated, Remove, the source link scrolling to and highlighting its message (and saying so
// when the message is not on the page), API errors shown inline, the degraded and failed
// compaction notices, the empty state, a refresh when a run ends, and the Chinese labels.
// Needs only Chromium:
//
//   node tests/browser/memory.test.mjs        (CHROMIUM, WARDEN_ARTIFACTS optional)

import { after, before, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  ADMIN, assertInert, assertNoProblems, expectText, newPage, signIn, startHarness, waitUntil,
} from './admin-helpers.mjs';
import { HOSTILE_MEMORY, ELSEWHERE_MESSAGE_ID } from './mock-memory.mjs';
import { addStoredConversation } from './mock-server.mjs';

const TURNS = 10;

let harness;
let mock;
let artifacts;

before(async () => {
  harness = await startHarness('memory');
  ({ mock, artifacts } = harness);
});

after(async () => {
  await harness?.close();
});

beforeEach(() => {
  harness.problems.length = 0;
});

test('the panel lists the memory by kind with trust badges, and hostile text stays text', async () => {
  const conversation = storedConversation();
  const page = await signedInPage();
  try {
    assert.equal(await page.getByTestId('memory-toggle').isVisible(), false, 'no toggle without an open conversation');
    const panel = await openMemory(page, conversation);
    const toggle = page.getByTestId('memory-toggle');
    assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
    assert.equal(await toggle.getAttribute('aria-controls'), await panel.getAttribute('id'));
    await expectText(page.getByTestId('chat-title'), 'Checkout latency');

    const groups = panel.getByTestId('memory-group');
    await waitUntil('every kind is listed', async () => (await groups.count()) === 6);
    assert.deepEqual(await groups.evaluateAll((elements) => elements.map((element) => element.dataset.kind)),
      ['user_goals', 'confirmed_facts', 'preferences', 'decisions', 'open_tasks', 'resource_refs']);
    assert.deepEqual(await groups.locator('h3').allTextContents(),
      ['Goals', 'Confirmed facts', 'Preferences', 'Decisions', 'Open tasks', 'Resources']);
    assert.equal(await panel.getByTestId('memory-item').count(), 7);
    await expectText(item(panel, conversation, 1).getByTestId('memory-text'), 'Keep checkout p99 latency under 300 ms.');
    await expectText(item(panel, conversation, 1).getByTestId('memory-trust'), 'you said');
    await expectText(item(panel, conversation, 4).getByTestId('memory-trust'), 'verified by a source');
    await expectText(item(panel, conversation, 5).getByTestId('memory-trust'), 'you confirmed');
    await expectText(item(panel, conversation, 6).getByTestId('memory-trust'), 'assistant’s suggestion');
    // Confirm only where the user stated the item; Remove and the source link everywhere.
    for (const n of [1, 2, 3]) assert.equal(await item(panel, conversation, n).getByTestId('memory-confirm').count(), 1, `item ${n} can be confirmed`);
    for (const n of [4, 5, 6, 7]) assert.equal(await item(panel, conversation, n).getByTestId('memory-confirm').count(), 0, `item ${n} cannot be confirmed`);
    assert.equal(await panel.getByTestId('memory-remove').count(), 7);
    assert.equal(await panel.getByTestId('memory-source').count(), 7);
    await expectText(panel.getByTestId('memory-compaction'), 'Summarizing older messages into memory (attempt 1)');
    assert.equal(await panel.getByTestId('memory-compaction').getAttribute('data-status'), 'running');
    assert.equal(await panel.getByTestId('memory-degraded').count(), 0);

    // Hostile HTML is the item's text, not markup.
    assert.equal(await item(panel, conversation, 3).getByTestId('memory-text').textContent(), HOSTILE_MEMORY);
    await assertInert(page);
    await page.screenshot({ path: join(artifacts, 'memory-panel.png') });

    // Keyboard: Escape closes and returns to the toggle, Enter opens again.
    await item(panel, conversation, 1).getByTestId('memory-remove').focus();
    await page.keyboard.press('Escape');
    await panel.waitFor({ state: 'hidden' });
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.testid), 'memory-toggle');
    await page.keyboard.press('Enter');
    await panel.waitFor();
    assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
    await page.getByTestId('memory-close').click();
    await panel.waitFor({ state: 'hidden' });

    // A new chat has no conversation, so no toggle.
    await page.getByTestId('new-chat').click();
    await waitUntil('the toggle is hidden', async () => !(await toggle.isVisible()));
    assert.equal(await panel.isVisible(), false);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('Confirm marks a stated item as confirmed, and Remove deletes an item', async () => {
  const conversation = storedConversation();
  const page = await signedInPage();
  try {
    const panel = await openMemory(page, conversation);
    const stated = item(panel, conversation, 2);
    await stated.getByTestId('memory-confirm').click();
    await expectText(stated.getByTestId('memory-trust'), 'you confirmed');
    assert.equal(await stated.getAttribute('data-trust'), 'user_confirmed');
    assert.equal(await stated.getByTestId('memory-confirm').count(), 0);
    assert.equal(serverItem(conversation, 2).trust, 'user_confirmed');
    assert.deepEqual(requests(conversation, 'confirm'), [[`mem_${conversation.id}_2`, 200]]);
    await page.screenshot({ path: join(artifacts, 'memory-confirmed.png') });

    const proposed = item(panel, conversation, 6);
    await proposed.getByTestId('memory-remove').click();
    await proposed.waitFor({ state: 'detached' });
    assert.equal(await panel.getByTestId('memory-item').count(), 6);
    assert.equal(await panel.locator('[data-testid="memory-group"][data-kind="open_tasks"]').count(), 0, 'an emptied group goes');
    assert.equal(serverItem(conversation, 6), undefined);
    assert.deepEqual(requests(conversation, 'delete'), [[`mem_${conversation.id}_6`, 204]]);

    // Reopening reads the memory again: the changes held.
    await page.getByTestId('memory-toggle').click();
    await panel.waitFor({ state: 'hidden' });
    await page.getByTestId('memory-toggle').click();
    await waitUntil('the memory is read again', async () => requests(conversation, 'read').length === 2);
    await expectText(item(panel, conversation, 2).getByTestId('memory-trust'), 'you confirmed');
    assert.equal(await panel.getByTestId('memory-item').count(), 6);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('the source link scrolls to its message and highlights it, or says it is not on the page', async () => {
  const conversation = storedConversation();
  const firstQuestion = conversation.messages[0];
  const page = await signedInPage({ viewport: { width: 1200, height: 700 } });
  try {
    const panel = await openMemory(page, conversation);
    const target = page.locator(`[data-testid="message"][data-message-id="${firstQuestion.id}"]`);
    await target.waitFor();
    assert.equal(await inView(target), false, 'the first question starts out of view');
    await item(panel, conversation, 1).getByTestId('memory-source').click();
    await waitUntil('the source message is highlighted', async () => /\bis-highlighted\b/.test(await target.getAttribute('class')));
    await waitUntil('the source message is scrolled into view', () => inView(target));
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.messageId), String(firstQuestion.id));
    await page.screenshot({ path: join(artifacts, 'memory-source.png') });
    await waitUntil('the highlight fades', async () => !/\bis-highlighted\b/.test(await target.getAttribute('class')), 5000);

    const elsewhere = item(panel, conversation, 7);
    assert.equal(await elsewhere.getByTestId('memory-source').getAttribute('data-message-id'), ELSEWHERE_MESSAGE_ID);
    await elsewhere.getByTestId('memory-source').click();
    await expectText(elsewhere.getByTestId('memory-source-note'), 'not shown on this page');
    assert.equal(await page.locator('.is-highlighted').count(), 0);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('API errors from Confirm and Remove show inline with the server\'s message', async () => {
  const conversation = storedConversation();
  const page = await signedInPage({ expected: [/^409 .*\/memory\/[^/]+\/confirm$/, /^404 .*\/memory\/[^/]+$/] });
  try {
    const panel = await openMemory(page, conversation);
    // Confirmed in another tab after this page drew the item: 409.
    serverItem(conversation, 1).trust = 'user_confirmed';
    const goal = item(panel, conversation, 1);
    await goal.getByTestId('memory-confirm').click();
    await expectText(goal.getByTestId('memory-item-error'), 'Could not confirm: only an item the user stated can be confirmed; this one is user_confirmed');
    assert.ok(await goal.getByTestId('memory-confirm').isEnabled());
    await expectText(goal.getByTestId('memory-confirm'), 'Confirm');
    assert.deepEqual(requests(conversation, 'confirm'), [[`mem_${conversation.id}_1`, 409]]);

    // Removed elsewhere: 404.
    const memory = mock.state.memory.get(conversation.id);
    memory.items = memory.items.filter((entry) => entry.id !== `mem_${conversation.id}_4`);
    const fact = item(panel, conversation, 4);
    await fact.getByTestId('memory-remove').click();
    await expectText(fact.getByTestId('memory-item-error'), `Could not remove: memory item \`mem_${conversation.id}_4\` not found`);
    assert.equal(await panel.getByTestId('memory-item').count(), 7);
    await page.screenshot({ path: join(artifacts, 'memory-errors.png') });
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('degraded memory and a failed compaction job are explained', async () => {
  const conversation = storedConversation();
  const page = await signedInPage();
  try {
    const panel = await openMemory(page, conversation);
    await panel.getByTestId('memory-compaction').waitFor();
    const memory = mock.state.memory.get(conversation.id);
    memory.status = 'degraded';
    memory.degraded_reason = 'the summarizer timed out <b>twice</b>';
    Object.assign(memory.compaction, { status: 'failed', attempts: 3, last_error: 'model unavailable <script>window.__xss=2</script>' });
    await page.getByTestId('memory-close').click();
    await page.getByTestId('memory-toggle').click();
    await expectText(panel.getByTestId('memory-degraded'), 'Memory is degraded: the summarizer timed out <b>twice</b>');
    await expectText(panel.getByTestId('memory-compaction'), 'Summarizing older messages failed (attempt 3): model unavailable <script>');
    assert.equal(await panel.getByTestId('memory-compaction').getAttribute('data-status'), 'failed');
    await assertInert(page);
    await page.screenshot({ path: join(artifacts, 'memory-degraded.png') });

    // A finished job says nothing.
    memory.compaction.status = 'done';
    await page.getByTestId('memory-close').click();
    await page.getByTestId('memory-toggle').click();
    await waitUntil('the job line goes', async () => (await panel.getByTestId('memory-compaction').count()) === 0);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('an empty memory says why, and the open panel refreshes when a run ends', async () => {
  const page = await signedInPage();
  try {
    await page.getByTestId('composer').fill('Hello, what can you do?');
    await page.getByTestId('composer').press('Enter');
    const answer = page.locator('[data-testid="message"][data-role="assistant"]').first();
    await answer.waitFor();
    await page.getByTestId('memory-toggle').click();
    const panel = page.getByTestId('memory-panel');
    await expectText(panel.getByTestId('memory-note'), 'Nothing remembered yet — older messages are summarized into memory when the conversation grows long.');
    assert.equal(await panel.getByTestId('memory-item').count(), 0);
    await page.screenshot({ path: join(artifacts, 'memory-empty.png') });

    // The run remembers something while it runs; the panel shows it once the run ends.
    const id = Number(decodeURIComponent(new URL(page.url()).hash.replace('#/c/', '')));
    const conversation = mock.state.conversations.get(id);
    const now = Math.floor(Date.now() / 1000);
    mock.state.memory.get(id).items.push({
      id: `mem_${id}_run`, kind: 'user_goals', text: 'Learn what Warden can do.', source_message_id: String(conversation.messages[0].id),
      citation_id: null, trust: 'user_stated', created_at: now, updated_at: now,
    });
    assert.equal(await answer.getAttribute('data-live'), 'true', 'the run is still going');
    await waitUntil('the answer is stored', async () => (await answer.getAttribute('data-live')) === null && (await answer.locator('.message-time').count()) === 1);
    await expectText(panel.locator(`[data-item-id="mem_${id}_run"]`).getByTestId('memory-text'), 'Learn what Warden can do.');
    assert.equal(await panel.getByTestId('memory-note').isVisible(), false);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('the panel\'s labels in Chinese', async () => {
  const conversation = storedConversation();
  const page = await signedInPage();
  try {
    const panel = await openMemory(page, conversation);
    await page.getByTestId('lang-toggle').click();
    await expectText(page.getByTestId('memory-toggle'), '记忆');
    await expectText(panel.locator('.memory-title'), '本对话的记忆');
    assert.deepEqual(await panel.getByTestId('memory-group').locator('h3').allTextContents(),
      ['目标', '已确认的事实', '偏好', '决定', '待办事项', '资源']);
    await expectText(item(panel, conversation, 1).getByTestId('memory-trust'), '你说过');
    await expectText(item(panel, conversation, 4).getByTestId('memory-trust'), '已由来源验证');
    await expectText(item(panel, conversation, 5).getByTestId('memory-trust'), '你已确认');
    await expectText(item(panel, conversation, 6).getByTestId('memory-trust'), '助手的建议');
    await expectText(item(panel, conversation, 1).getByTestId('memory-confirm'), '确认');
    await expectText(item(panel, conversation, 1).getByTestId('memory-remove'), '删除');
    await expectText(item(panel, conversation, 1).getByTestId('memory-source'), '来源消息');
    await expectText(panel.getByTestId('memory-compaction'), '正在将较早的消息总结进记忆');
    await item(panel, conversation, 7).getByTestId('memory-source').click();
    await expectText(item(panel, conversation, 7).getByTestId('memory-source-note'), '来源消息不在此页面上');
    await item(panel, conversation, 2).getByTestId('memory-confirm').click();
    await expectText(item(panel, conversation, 2).getByTestId('memory-trust'), '你已确认');
    await page.screenshot({ path: join(artifacts, 'memory-zh.png') });

    // An empty memory, in Chinese too.
    await page.getByTestId('new-chat').click();
    await page.getByTestId('composer').fill('你好');
    await page.getByTestId('composer').press('Enter');
    await page.locator('[data-testid="message"][data-role="assistant"]').first().waitFor();
    await page.getByTestId('memory-toggle').click();
    await expectText(panel.getByTestId('memory-note'), '还没有记住任何内容');
    await page.getByTestId('lang-toggle').click();
    await expectText(panel.getByTestId('memory-note'), 'Nothing remembered yet');
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
  const narrow = await signedInPage({ colorScheme: 'dark', viewport: { width: 390, height: 800 } });
  try {
    const panel = await openMemory(narrow, storedConversation());
    await narrow.screenshot({ path: join(artifacts, 'memory-dark-narrow.png') });
    await panel.getByTestId('memory-source').first().click();
    await panel.waitFor({ state: 'hidden' }); // On a narrow screen, jumping shows the message.
    assertNoProblems(harness);
  } finally {
    await narrow.close();
  }
});

// --- Helpers ------------------------------------------------------------------------------------

/** A conversation of TURNS stored turns whose first question seeds the mock's memory. */
function storedConversation() {
  const turns = Array.from({ length: TURNS }, (_, index) => [
    index === 0
      ? '[[memory]] Checkout p99 latency has been above 300 ms since the 14:05 deploy. Keep it under 300 ms, and answer in short bullet points.'
      : `Follow-up question ${index + 1}: what should I look at next?`,
    [`Answer ${index + 1}.`, '', '- Check the connection pool first.', '- Then the slow query log.', '- Then the deploy diff.', '',
      'Each step narrows where the latency comes from.'].join('\n'),
  ]);
  return addStoredConversation(mock.state, ADMIN.name, 'Checkout latency', turns);
}

/** Opens the conversation and its memory panel; resolves to the panel's locator. */
async function openMemory(page, conversation) {
  await page.evaluate((id) => { window.location.hash = `#/c/${id}`; }, conversation.id);
  await page.locator('[data-testid="message"]').nth(TURNS * 2 - 1).waitFor();
  await page.getByTestId('memory-toggle').click();
  const panel = page.getByTestId('memory-panel');
  await panel.waitFor();
  return panel;
}

function item(panel, conversation, n) {
  return panel.locator(`[data-testid="memory-item"][data-item-id="mem_${conversation.id}_${n}"]`);
}

function serverItem(conversation, n) {
  return mock.state.memory.get(conversation.id).items.find((entry) => entry.id === `mem_${conversation.id}_${n}`);
}

/** [itemId, status] of the mock's memory calls of one action for a conversation. */
function requests(conversation, action) {
  return mock.state.memoryRequests.filter((entry) => entry.conversationId === conversation.id && entry.action === action)
    .map((entry) => (action === 'read' ? [entry.status] : [entry.itemId, entry.status]));
}

/** Whether the element lies wholly inside the visible part of the messages' scroller. */
async function inView(locator) {
  return locator.evaluate((element) => {
    const scroller = element.closest('.messages').getBoundingClientRect();
    const box = element.getBoundingClientRect();
    return box.top >= scroller.top - 1 && box.bottom <= scroller.bottom + 1;
  });
}

async function signedInPage(options = {}) {
  const page = await newPage(harness, options);
  await signIn(page, harness);
  return page;
}
