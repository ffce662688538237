// Browser tests of the Users, API tokens and Audit screens against the in-memory mock
// (tests/browser/mock-admin.mjs): creating an account with groups, changing its role and
// groups, disabling and enabling it, resetting a password (which ends that user's open
// session), an admin's own row that cannot demote or disable them, groups created and removed
// after confirming, a token's secret shown once with a copy button and then only its
// metadata, revoking, the audit log newest first with actor, action and time filters and
// paging, the Chinese UI on every admin screen, and hostile names staying inert. Needs only
// Chromium:
//
//   node tests/browser/admin.test.mjs        (CHROMIUM, WARDEN_ARTIFACTS optional)

import { after, before, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  VIEWER, assertInert, assertNoProblems, assertTranslated, countAlerts, expectText, newPage, signIn, startHarness, waitUntil,
} from './admin-helpers.mjs';
import { HOSTILE } from './mock-admin.mjs';

let harness;

before(async () => {
  harness = await startHarness('admin');
});

after(async () => {
  await harness?.close();
});

beforeEach(() => {
  harness.problems.length = 0;
});

async function open(page, name) {
  await page.getByTestId(`nav-${name}`).click();
  await page.getByTestId(name).waitFor();
  assert.equal(new URL(page.url()).hash, `#/${name}`);
}

const userRow = (page, name) => page.locator(`[data-testid="user-row"][data-user="${name}"]`);
const mockUser = (name) => harness.mock.state.users.find((user) => user.name === name);
const audited = (action, target) => harness.mock.state.admin.audit.some((row) => row.action === action && row.target === target);

test('an admin creates an account, changes its role and groups, disables, enables and resets its password', async () => {
  const page = await newPage(harness, { expected: [/^409 .*\/api\/users(\/alice)?$/] });
  const vera = await newPage(harness, { expected: [/^401 /] });
  try {
    await signIn(page, harness);
    await open(page, 'users');
    await userRow(page, 'vera').waitFor();
    assert.deepEqual(await page.getByTestId('user-name').allTextContents(), ['alice', 'otto', 'vera']);
    // The admin's own row: no role change, no Disable.
    const self = userRow(page, 'alice');
    await expectText(self, 'you');
    assert.equal(await self.getByTestId('user-role-select').isDisabled(), true);
    assert.equal(await self.getByTestId('user-disable').isVisible(), false);
    assert.equal(await page.getByTestId('nav-users').getAttribute('aria-current'), 'page');
    // Were the select enabled, the server would refuse (409), and its message shows.
    await self.getByTestId('user-role-select').evaluate((select) => { select.disabled = false; });
    await self.getByTestId('user-role-select').selectOption('viewer');
    await expectText(page.getByTestId('users-error'), 'you cannot change your own role; another admin can');
    assert.equal(await self.getByTestId('user-role-select').inputValue(), 'admin');
    assert.equal(mockUser('alice').role, 'admin');

    await page.getByTestId('user-create-name').fill('nina');
    await page.getByTestId('user-create-role').selectOption('operator');
    await page.getByTestId('user-create-password').fill('short');
    await page.getByTestId('user-create-submit').click();
    await expectText(page.getByTestId('user-create-error'), 'at least 8 characters');
    await page.getByTestId('user-create-password').fill('nina-password-1');
    await page.getByTestId('user-create-form').getByText('ops', { exact: true }).click();
    await page.getByTestId('user-create-submit').click();
    await expectText(page.getByTestId('users-status'), 'Created nina.');
    const nina = userRow(page, 'nina');
    assert.equal(await nina.getByTestId('user-role-select').inputValue(), 'operator');
    await expectText(nina.getByTestId('user-groups'), 'ops');
    assert.equal(await page.getByTestId('user-create-name').inputValue(), '', 'the form is cleared');

    await page.getByTestId('user-create-name').fill('nina');
    await page.getByTestId('user-create-password').fill('another-password');
    await page.getByTestId('user-create-submit').click();
    await expectText(page.getByTestId('user-create-error'), 'user `nina` already exists');

    await nina.getByTestId('user-role-select').selectOption('viewer');
    await expectText(page.getByTestId('users-status'), 'Changed the role of nina.');
    assert.equal(mockUser('nina').role, 'viewer');

    await nina.getByTestId('user-edit-groups').click();
    const groupsForm = page.getByTestId('user-groups-form');
    await expectText(groupsForm, 'Groups of nina');
    await groupsForm.getByText('hr', { exact: true }).click();
    await groupsForm.getByText('ops', { exact: true }).click();
    await groupsForm.getByTestId('user-groups-save').click();
    await expectText(page.getByTestId('users-status'), 'Saved the groups of nina.');
    assert.deepEqual(await nina.getByTestId('user-group').allTextContents(), ['hr']);

    await nina.getByTestId('user-disable').click();
    await expectText(nina.getByTestId('user-disable-question'), 'Disable nina?');
    assert.equal(mockUser('nina').disabled, false, 'nothing happens before confirming');
    await nina.getByTestId('user-disable-confirm').click();
    await expectText(page.getByTestId('users-status'), 'Disabled nina.');
    await expectText(nina.getByTestId('user-state'), 'disabled');
    assert.equal(await nina.getAttribute('data-disabled'), 'true');
    await nina.getByTestId('user-enable').click();
    await expectText(nina.getByTestId('user-state'), 'enabled');

    // Resetting vera's password ends the session she has open.
    await signIn(vera, harness, VIEWER);
    await userRow(page, 'vera').getByTestId('user-reset-password').click();
    const form = page.getByTestId('user-password-form');
    await expectText(form, 'New password for vera');
    await form.getByTestId('user-password-new').fill('a brand new password');
    await form.getByTestId('user-password-again').fill('a different one');
    await form.getByTestId('user-password-save').click();
    await expectText(form.getByTestId('user-password-error'), 'The two passwords differ.');
    await form.getByTestId('user-password-again').fill('a brand new password');
    await form.getByTestId('user-password-save').click();
    await expectText(page.getByTestId('users-status'), 'Set a new password for vera');
    await vera.getByTestId('new-chat').click();
    await vera.getByTestId('nav-knowledge').click();
    await vera.getByTestId('login-name').waitFor();
    await expectText(vera.getByTestId('login-error'), 'Your session ended');
    assert.equal(mockUser('vera').password, 'a brand new password');

    for (const action of ['user.create', 'user.role', 'user.groups', 'user.disable', 'user.enable']) assert.ok(audited(action, 'nina'), action);
    assert.ok(audited('user.password_reset', 'vera'));
    await assertTranslated(page);
    await page.screenshot({ path: join(harness.artifacts, 'users.png'), fullPage: true });
    assertNoProblems(harness);
  } finally {
    mockUser('vera').password = VIEWER.password;
    await page.close();
    await vera.close();
  }
});

test('groups are created, offered to accounts, and removed only after confirming', async () => {
  const page = await newPage(harness, { expected: [/^400 .*\/api\/groups$/] });
  try {
    await signIn(page, harness);
    await open(page, 'users');
    await page.getByTestId('group-row').first().waitFor();
    await page.getByTestId('group-create-name').fill('bad name');
    await page.getByTestId('group-create-submit').click();
    await expectText(page.getByTestId('groups-error'), 'must be 1–64 letters');
    await page.getByTestId('group-create-name').fill('db-team');
    await page.getByTestId('group-create-submit').click();
    await expectText(page.getByTestId('groups-status'), 'Created group db-team.');
    const row = page.locator('[data-testid="group-row"][data-group="db-team"]');
    await row.waitFor();
    await expectText(page.getByTestId('user-create-form'), 'db-team');
    await row.getByTestId('group-remove').click();
    await expectText(row.getByTestId('group-remove-question'), 'Remove group db-team?');
    await row.getByTestId('group-remove-confirm').click();
    await expectText(page.getByTestId('groups-status'), 'Removed group db-team.');
    assert.equal(await row.count(), 0);
    assert.equal(harness.mock.state.admin.groups.has('db-team'), false);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('a new token’s secret is shown once, then only its metadata; tokens are revoked after confirming', async () => {
  const page = await newPage(harness, { permissions: ['clipboard-read', 'clipboard-write'] });
  await countAlerts(page);
  try {
    await signIn(page, harness, VIEWER);
    await open(page, 'tokens');
    await expectText(page.getByTestId('tokens-empty'), 'No tokens.');
    assert.equal(await page.getByTestId('tokens-owner-form').count(), 0, 'only admins look at others’ tokens');
    await page.getByTestId('token-label-input').fill('laptop');
    await page.getByTestId('token-create-submit').click();
    const secret = page.getByTestId('token-secret');
    await secret.waitFor();
    const value = await secret.inputValue();
    assert.match(value, /^wdn_[0-9a-f]{64}$/);
    await expectText(page.getByTestId('token-warning'), 'shown only this once');
    await page.getByTestId('token-copy').click();
    await expectText(page.getByTestId('token-copied'), 'Copied.');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), value);
    await expectText(page.getByTestId('token-label'), 'laptop');
    await expectText(page.getByTestId('token-state'), 'active');
    await page.screenshot({ path: join(harness.artifacts, 'token-created.png'), fullPage: true });

    await page.getByTestId('token-dismiss').click();
    assert.equal(await page.getByTestId('token-secret').count(), 0);
    assert.equal((await page.content()).includes(value), false, 'the secret is gone from the page');
    await page.reload();
    await page.getByTestId('token-row').first().waitFor();
    assert.equal((await page.content()).includes(value), false, 'the list holds metadata only');
    await expectText(page.getByTestId('token-id'), 'tok_');

    // A label holding HTML stays text.
    await page.getByTestId('token-label-input').fill(HOSTILE);
    await page.getByTestId('token-create-submit').click();
    await expectText(page.getByTestId('token-warning'), HOSTILE);
    await open(page, 'knowledge');
    await open(page, 'tokens');
    assert.equal(await page.getByTestId('token-secret').count(), 0, 'leaving the screen forgets the secret');
    const hostile = page.getByTestId('token-row').filter({ hasText: HOSTILE });
    await expectText(hostile.getByTestId('token-label'), HOSTILE);
    await assertInert(page);

    const laptop = page.getByTestId('token-row').filter({ hasText: 'laptop' });
    await laptop.getByTestId('token-revoke').click();
    await expectText(laptop.getByTestId('token-revoke-question'), 'Revoke "laptop"?');
    await laptop.getByTestId('token-revoke-confirm').click();
    await expectText(page.getByTestId('tokens-status'), 'Revoked the token.');
    await expectText(laptop.getByTestId('token-state'), 'revoked');
    assert.equal(await laptop.getAttribute('data-revoked'), 'true');
    assert.equal(await laptop.getByTestId('token-revoke').count(), 0);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('an admin sees another user’s tokens', async () => {
  const page = await newPage(harness);
  try {
    await signIn(page, harness);
    await open(page, 'tokens');
    await page.getByTestId('tokens-owner').fill('vera');
    await page.getByTestId('tokens-owner-submit').click();
    await expectText(page.getByTestId('token-label').first(), HOSTILE);
    assert.equal(await page.getByTestId('token-row').count(), 2);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('the audit log is newest first, filters by actor, action and time, and pages', async () => {
  const page = await newPage(harness, { timezoneId: 'UTC' });
  try {
    await signIn(page, harness);
    await open(page, 'audit');
    const rows = page.getByTestId('audit-row');
    await rows.first().waitFor();
    const ids = async () => (await rows.evaluateAll((items) => items.map((item) => Number(item.dataset.id))));
    const first = await ids();
    assert.equal(first.length, 50);
    assert.deepEqual(first, [...first].sort((a, b) => b - a), 'newest first');
    assert.equal(first[0], harness.mock.state.admin.audit.length);
    assert.equal(await page.getByTestId('audit-newer').isDisabled(), true);
    await page.getByTestId('audit-older').click();
    await expectText(page.getByTestId('audit-page'), 'Page 2');
    const second = await ids();
    assert.ok(second[0] < first[first.length - 1], 'page 2 is older than page 1');
    assert.equal(await page.getByTestId('audit-newer').isEnabled(), true);
    await waitUntil('the last page', async () => {
      if (await page.getByTestId('audit-older').isDisabled()) return true;
      await page.getByTestId('audit-older').click();
      return false;
    });
    const last = await ids();
    assert.equal(last[last.length - 1], 1, 'the last page ends with the oldest row');
    await page.getByTestId('audit-newer').click();
    await page.getByTestId('audit-newer').click();
    await waitUntil('back on page 1', async () => (await ids())[0] === first[0]);

    await page.getByTestId('audit-actor-filter').fill('otto');
    await page.getByTestId('audit-action-filter').fill('auth');
    await page.getByTestId('audit-apply').click();
    await waitUntil('only otto’s auth rows', async () => {
      const found = await rows.evaluateAll((items) => items.map((item) => [item.dataset.actor, item.dataset.action]));
      return found.length > 0 && found.every(([actor, action]) => actor === 'otto' && action.startsWith('auth.'));
    });
    await expectText(page.getByTestId('audit-page'), 'Page 1');

    // A time window: rows from 90 to 60 minutes ago (the seeded rows are a minute apart).
    await page.getByTestId('audit-clear').click();
    const minute = (offset) => new Date(Date.now() - offset * 60_000).toISOString().slice(0, 16);
    await page.getByTestId('audit-since').fill(minute(90));
    await page.getByTestId('audit-until').fill(minute(60));
    await page.getByTestId('audit-apply').click();
    await waitUntil('rows inside the window', async () => {
      const times = await page.getByTestId('audit-time').evaluateAll((items) => items.map((item) => Date.parse(item.getAttribute('datetime'))));
      const from = Date.parse(`${minute(90)}:00Z`);
      const to = Date.parse(`${minute(60)}:59Z`);
      return times.length >= 25 && times.every((time) => time >= from && time <= to);
    });
    await page.getByTestId('audit-since').fill(minute(10));
    await page.getByTestId('audit-apply').click();
    await expectText(page.getByTestId('audit-filter-error'), '"From" must not be after "Until".');
    await page.getByTestId('audit-clear').click();
    await waitUntil('all rows again', async () => (await rows.count()) === 50);
    await assertTranslated(page);
    await page.screenshot({ path: join(harness.artifacts, 'audit.png') });
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('hostile user, group and audit text stays inert', async () => {
  const { users, admin } = harness.mock.state;
  users.push({ id: 9999, name: HOSTILE, password: 'x', role: 'viewer', disabled: false, groups: [HOSTILE], created_at: 1_760_000_000 });
  admin.groups.set(HOSTILE, { name: HOSTILE, created_at: 1_760_000_000 });
  admin.audit.push({ id: admin.audit.length + 1, at: Math.floor(Date.now() / 1000), actor: HOSTILE, action: `user.${HOSTILE}`, target: HOSTILE, outcome: 'denied', detail: { note: HOSTILE } });
  const page = await newPage(harness);
  await countAlerts(page);
  try {
    await signIn(page, harness);
    await open(page, 'users');
    const row = page.getByTestId('user-row').filter({ hasText: HOSTILE });
    await expectText(row.getByTestId('user-name'), HOSTILE);
    await expectText(row.getByTestId('user-groups'), HOSTILE);
    await expectText(page.getByTestId('group-row').filter({ hasText: HOSTILE }).getByTestId('group-members'), HOSTILE);
    await row.getByTestId('user-disable').click();
    await expectText(row.getByTestId('user-disable-question'), `Disable ${HOSTILE}?`);
    await assertInert(page);
    await open(page, 'audit');
    const entry = page.getByTestId('audit-row').first();
    await expectText(entry.getByTestId('audit-actor'), HOSTILE);
    await expectText(entry.getByTestId('audit-detail'), '<img src=x onerror=');
    await assertInert(page);
    assertNoProblems(harness);
  } finally {
    users.splice(users.findIndex((user) => user.id === 9999), 1);
    admin.groups.delete(HOSTILE);
    await page.close();
  }
});

test('the Chinese UI shows every admin screen in 中文', async () => {
  const page = await newPage(harness, { locale: 'zh-CN', viewport: { width: 1200, height: 1300 } });
  try {
    await signIn(page, harness);
    if ((await page.getByTestId('lang-toggle').textContent()) === '中文') await page.getByTestId('lang-toggle').click();
    await expectText(page.getByTestId('nav-users'), '用户');
    await open(page, 'knowledge');
    await expectText(page.getByTestId('knowledge').locator('h1'), '知识库');
    await expectText(page.getByTestId('kb-table').locator('thead'), '上次同步');
    await expectText(page.getByTestId('readers').first(), '组');
    await page.getByTestId('kb-sync').first().click();
    await expectText(page.getByTestId('sync-label'), '同步完成');
    await expectText(page.getByTestId('sync-report'), '跳过的文件（1）');
    await page.getByTestId('search-query').fill('disk');
    await page.getByTestId('search-submit').click();
    await expectText(page.getByTestId('search-rank-bm25').first(), 'BM25 第 1 名');
    await page.getByTestId('search-open-passage').first().click();
    await expectText(page.getByTestId('passage'), '引用的段落');
    await page.screenshot({ path: join(harness.artifacts, 'zh-passage.png') });
    await page.keyboard.press('Escape');
    await assertTranslated(page);
    await page.screenshot({ path: join(harness.artifacts, 'zh-knowledge.png'), fullPage: true });
    for (const [name, title, text] of [['users', '用户', '创建账户'], ['tokens', 'API 令牌', '创建令牌'], ['audit', '审计日志', '较早 →']]) {
      await open(page, name);
      await expectText(page.getByTestId(name).locator('h1'), title);
      await expectText(page.getByTestId(name), text);
      await assertTranslated(page);
      await page.screenshot({ path: join(harness.artifacts, `zh-${name}.png`), fullPage: true });
    }
    // Switching back re-translates in place.
    await page.getByTestId('lang-toggle').click();
    await expectText(page.getByTestId('audit').locator('h1'), 'Audit log');
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});
