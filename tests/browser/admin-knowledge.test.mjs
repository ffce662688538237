// Browser tests of the Knowledge screen and the passage viewer against the in-memory mock
// (tests/browser/mock-admin.mjs): the list with readers, adding a folder (and a path outside
// the allowed roots refused with the server's message), a sync's live progress bar and its
// report with skipped and failed files and their reasons, cancelling a sync and a second sync
// refused while one runs, editing readers with validation, removing only after confirming,
// the search preview with citations and per-retriever ranks, the passage viewer opened from
// a search hit and from a chat citation, what viewers and operators see, and hostile names
// and texts staying inert. Needs only Chromium:
//
//   node tests/browser/admin-knowledge.test.mjs        (CHROMIUM, WARDEN_ARTIFACTS optional)

import { after, before, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  OPERATOR, VIEWER, assertInert, assertNoProblems, assertTranslated, countAlerts, expectText, newPage, signIn,
  startHarness, waitUntil,
} from './admin-helpers.mjs';
import { HOSTILE } from './mock-admin.mjs';

let harness;

before(async () => {
  harness = await startHarness('admin-knowledge');
});

after(async () => {
  await harness?.close();
});

beforeEach(() => {
  harness.problems.length = 0;
});

async function openKnowledge(page) {
  await page.getByTestId('nav-knowledge').click();
  await page.getByTestId('kb-table').waitFor();
  assert.equal(new URL(page.url()).hash, '#/knowledge');
}

const row = (page, name) => page.locator(`[data-testid="kb-row"][data-kb="${name}"]`);
const panel = (page, name) => page.locator(`[data-testid="sync-panel"][data-kb="${name}"]`);

test('an admin adds a folder (a refused path shows why) and follows its sync to the report', async () => {
  const page = await newPage(harness, { expected: [/^403 .*\/api\/kb$/] });
  harness.mock.state.admin.syncStepMs = 200;
  harness.mock.state.admin.syncHoldAt = 4;
  try {
    await signIn(page, harness);
    await openKnowledge(page);
    assert.equal(await page.getByTestId('kb-row').count(), 2);
    await expectText(row(page, 'hr-private').getByTestId('readers'), 'Group hr');
    await expectText(row(page, 'ops-runbooks').getByTestId('kb-root'), '/srv/kb/ops');
    assert.equal(await page.getByTestId('nav-knowledge').getAttribute('aria-current'), 'page');

    await page.getByTestId('kb-add-name').fill('guides');
    await page.getByTestId('kb-add-path').fill('/etc/secrets');
    await page.getByTestId('kb-add-submit').click();
    await expectText(page.getByTestId('kb-add-error'), 'outside the folders this server may read');
    await page.getByTestId('kb-add-readers').fill('role:operator, nonsense');
    await page.getByTestId('kb-add-submit').click();
    await expectText(page.getByTestId('kb-add-error'), 'Not a reader: nonsense');

    await page.getByTestId('kb-add-readers').fill('role:operator, group:ops');
    await page.getByTestId('kb-add-path').fill('/srv/kb/guides');
    await page.getByTestId('kb-add-submit').click();
    await expectText(page.getByTestId('kb-status'), 'Added guides');
    await expectText(row(page, 'guides').getByTestId('readers'), 'Group ops');
    const sync = panel(page, 'guides');
    await sync.waitFor();
    // The bar moves: files done grows while the sync runs, and the numbers say how far.
    await waitUntil('the first files are indexed', async () => Number(await sync.getAttribute('data-files-done')) >= 4);
    const early = Number(await sync.getAttribute('data-files-done'));
    await expectText(sync.getByTestId('sync-numbers'), /of 10 files · \d+ chunks · [\d.]+ chunks\/s · about .+ left/);
    assert.equal(await sync.getByTestId('sync-bar').getAttribute('max'), '10');
    assert.ok(await sync.getByTestId('sync-cancel').isVisible());
    assert.equal(await row(page, 'guides').getByTestId('kb-sync').isDisabled(), true, 'no second sync from the same row');
    await page.screenshot({ path: join(harness.artifacts, 'sync-running.png') });
    harness.mock.state.admin.syncHoldAt = null;
    await waitUntil('more files are indexed', async () => Number(await sync.getAttribute('data-files-done')) > early);

    const report = sync.getByTestId('sync-report');
    await report.waitFor();
    await expectText(sync.getByTestId('sync-label'), 'The sync of guides finished.');
    assert.equal(await sync.getAttribute('data-state'), 'completed');
    assert.equal(await sync.getByTestId('sync-bar').evaluate((bar) => bar.value), 10);
    await expectText(report.getByTestId('sync-count-added'), '8');
    await expectText(report.getByTestId('sync-count-deleted'), '1');
    await expectText(report.getByTestId('sync-skipped'), 'Skipped files (1)');
    await expectText(report.getByTestId('sync-skipped-item'), 'images/diagram.png');
    await expectText(report.getByTestId('sync-skipped-item'), 'unsupported file type (.png)');
    await expectText(report.getByTestId('sync-failed-item'), 'the PDF is encrypted');
    await expectText(report.getByTestId('sync-failed-item'), `broken/${HOSTILE}.pdf`);
    assert.equal(await sync.getByTestId('sync-cancel').isVisible(), false);
    await expectText(row(page, 'guides').getByTestId('kb-documents'), '1');
    await assertInert(page);
    await assertTranslated(page);
    await page.screenshot({ path: join(harness.artifacts, 'sync-report.png'), fullPage: true });
    assertNoProblems(harness);
  } finally {
    harness.mock.state.admin.syncStepMs = 150;
    harness.mock.state.admin.syncHoldAt = null;
    await page.close();
  }
});

test('a running sync can be cancelled, and a second sync at the same time is refused', async () => {
  const admin = await newPage(harness);
  const operator = await newPage(harness, { expected: [/^409 .*\/sync$/] });
  harness.mock.state.admin.syncHoldAt = 2;
  try {
    await signIn(admin, harness);
    await openKnowledge(admin);
    await row(admin, 'ops-runbooks').getByTestId('kb-sync').click();
    const sync = panel(admin, 'ops-runbooks');
    await waitUntil('the sync indexes', async () => Number(await sync.getAttribute('data-files-done')) >= 1);

    await signIn(operator, harness, OPERATOR);
    await openKnowledge(operator);
    await row(operator, 'ops-runbooks').getByTestId('kb-sync').click();
    const refused = panel(operator, 'ops-runbooks');
    await expectText(refused.getByTestId('sync-error'), 'already syncing');
    await expectText(refused.getByTestId('sync-label'), 'did not start');
    assert.equal(await refused.getAttribute('data-state'), 'refused');

    await sync.getByTestId('sync-cancel').click();
    await expectText(sync.getByTestId('sync-label'), 'The sync of ops-runbooks was cancelled.');
    assert.equal(await sync.getAttribute('data-state'), 'cancelled');
    assert.equal(Number(await sync.getAttribute('data-files-done')), 2, 'stopped where the sync was held');
    assert.equal(await sync.getByTestId('sync-report').isVisible(), false);
    assert.equal(await sync.getByTestId('sync-cancel').isVisible(), false);
    // Once it ended, a new sync may start.
    await waitUntil('Sync is enabled again', async () => row(admin, 'ops-runbooks').getByTestId('kb-sync').isEnabled());
    assert.ok(harness.mock.state.admin.audit.some((entry) => entry.action === 'kb.sync_cancel'));
    assertNoProblems(harness);
  } finally {
    harness.mock.state.admin.syncHoldAt = null;
    await admin.close();
    await operator.close();
  }
});

test('readers are edited with validation, and removing asks first', async () => {
  const page = await newPage(harness, { expected: [/^404 .*\/readers$/] });
  try {
    await signIn(page, harness);
    await openKnowledge(page);
    await row(page, 'hr-private').getByTestId('kb-edit-readers').click();
    const input = page.getByTestId('kb-readers-input');
    await assert.doesNotReject(input.waitFor());
    assert.equal(await input.inputValue(), 'group:hr');
    assert.equal(await row(page, 'hr-private').getByTestId('kb-edit-readers').getAttribute('aria-expanded'), 'true');
    await input.fill('group:hr, bogus, user:');
    await expectText(page.getByTestId('kb-readers-error'), 'Not a reader: bogus, user:');
    await page.getByTestId('kb-readers-save').click();
    assert.deepEqual(harness.mock.state.admin.kbs.get('hr-private').readers, ['group:hr'], 'nothing sent while invalid');
    await input.fill('group:hr, group:nope');
    await expectText(page.getByTestId('kb-readers-preview'), 'Group nope');
    await page.getByTestId('kb-readers-save').click();
    await expectText(page.getByTestId('kb-readers-error'), 'group `nope` not found');
    await input.fill('group:hr, user:vera, role:operator');
    await input.press('Enter');
    await expectText(page.getByTestId('kb-status'), 'Saved the readers of hr-private.');
    const chips = row(page, 'hr-private').getByTestId('reader-chip');
    assert.deepEqual(await chips.evaluateAll((items) => items.map((item) => item.dataset.reader)), ['group:hr', 'role:operator', 'user:vera']);
    await expectText(row(page, 'hr-private').getByTestId('readers'), 'User vera');
    assert.equal(await page.getByTestId('kb-readers-form').count(), 0);

    // Remove: the first press only asks; Cancel keeps it; confirming removes it.
    const remove = row(page, 'hr-private').getByTestId('kb-remove');
    await remove.click();
    await expectText(row(page, 'hr-private').getByTestId('kb-remove-question'), 'Remove hr-private and its index?');
    assert.ok(harness.mock.state.admin.kbs.has('hr-private'));
    await row(page, 'hr-private').getByTestId('kb-remove-cancel').click();
    assert.equal(await row(page, 'hr-private').getByTestId('kb-remove-question').isVisible(), false);
    await remove.click();
    await row(page, 'hr-private').getByTestId('kb-remove-confirm').click();
    await expectText(page.getByTestId('kb-status'), 'Removed hr-private.');
    assert.equal(await row(page, 'hr-private').count(), 0);
    assert.equal(harness.mock.state.admin.kbs.has('hr-private'), false);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('the search preview shows citations and each retriever’s rank, and a hit opens its passage', async () => {
  const page = await newPage(harness);
  await countAlerts(page);
  try {
    await signIn(page, harness);
    await openKnowledge(page);
    await page.getByTestId('search-query').fill('disk');
    await page.getByTestId('search-submit').click();
    const hits = page.getByTestId('search-hit');
    await hits.first().waitFor();
    await expectText(page.getByTestId('search-status'), 'passages');
    await expectText(hits.first().getByTestId('search-hit-title'), 'When a disk is full');
    await expectText(hits.first().getByTestId('search-hit-citation'), 'ops-runbooks · disk/full-disk.md · Disk › When a disk is full › First checks · L12–24');
    await expectText(hits.first().getByTestId('search-rank-bm25'), 'BM25 #1');
    await expectText(hits.first().getByTestId('search-rank-vector'), 'Vector #1');
    await expectText(hits.nth(1).getByTestId('search-rank-vector'), 'Vector: not found');
    assert.equal(await hits.nth(1).getByTestId('search-rank-vector').getAttribute('data-missing'), 'true');

    await page.getByTestId('search-mode').selectOption('bm25');
    await page.getByTestId('search-submit').click();
    await waitUntil('every vector rank is missing', async () => {
      const missing = await page.locator('[data-testid="search-rank-vector"][data-missing="true"]').count();
      return missing > 0 && missing === (await hits.count());
    });

    await page.getByTestId('search-mode').selectOption('hybrid');
    await page.getByTestId('search-submit').click();
    await expectText(hits.first().getByTestId('search-rank-vector'), 'Vector #1');
    const open = hits.first().getByTestId('search-open-passage');
    await open.click();
    const dialog = page.getByTestId('passage');
    await expectText(dialog.getByTestId('passage-text'), 'Run `df -h` to see which filesystem is full');
    await expectText(dialog.getByTestId('passage-title'), 'When a disk is full');
    await expectText(dialog.getByTestId('passage-headings'), 'Disk › When a disk is full › First checks');
    await expectText(dialog.getByTestId('passage-location'), '12–24');
    await expectText(dialog.getByTestId('passage-kb'), 'ops-runbooks');
    assert.equal(await dialog.getByTestId('passage-before').count(), 0);
    assert.equal(await dialog.getByTestId('passage-after').count(), 2);
    await expectText(dialog.getByTestId('passage-after').first(), 'Find the largest directories');
    await page.screenshot({ path: join(harness.artifacts, 'passage-from-search.png') });
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
    assert.equal(await open.evaluate((button) => button === document.activeElement), true, 'focus returns to the opener');

    // A passage holding HTML shows it as text, in the list and in the viewer.
    await page.getByTestId('search-query').fill('磁盘满了');
    await page.getByTestId('search-submit').click();
    await expectText(hits.first().getByTestId('search-hit-text'), HOSTILE);
    await hits.first().getByTestId('search-open-passage').click();
    await expectText(dialog.getByTestId('passage-text'), HOSTILE);
    await expectText(dialog.getByTestId('passage-before').first(), 'Journald keeps logs');
    await dialog.getByTestId('passage-close').click();
    await dialog.waitFor({ state: 'hidden' });
    await assertInert(page);
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('a chat citation opens the cited passage in its document', async () => {
  const page = await newPage(harness);
  try {
    await signIn(page, harness);
    await page.getByTestId('composer').fill('[[kb]] my disk is full');
    await page.getByTestId('send').click();
    const ref = page.getByTestId('citation-ref').first();
    await ref.waitFor();
    await ref.click();
    const context = page.getByTestId('citation-panel').getByTestId('citation-open-passage');
    await expectText(context, 'Show in its document');
    await context.click();
    const dialog = page.getByTestId('passage');
    await expectText(dialog.getByTestId('passage-text'), 'Run `df -h`');
    assert.equal(await dialog.getAttribute('data-chunk-id'), '101');
    await expectText(dialog.getByTestId('passage-headings'), 'First checks');
    await page.screenshot({ path: join(harness.artifacts, 'passage-from-chat.png') });
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
    assertNoProblems(harness);
  } finally {
    await page.close();
  }
});

test('viewers see only what they may read and no admin controls; operators may sync', async () => {
  harness.mock.state.admin.kbs.set(HOSTILE, {
    name: HOSTILE, root: '/srv/kb/x', readers: ['role:viewer', `user:${HOSTILE}`], created_at: 1_760_000_000, synced_at: null, documents: 0, chunks: 0,
  });
  const viewer = await newPage(harness, { expected: [/^404 .*\/api\/kb\/passages\/301$/] });
  await countAlerts(viewer);
  const operator = await newPage(harness);
  try {
    await signIn(viewer, harness, VIEWER);
    for (const name of ['users', 'audit']) assert.equal(await viewer.getByTestId(`nav-${name}`).count(), 0, `no ${name} link`);
    assert.ok(await viewer.getByTestId('nav-tokens').isVisible());
    await openKnowledge(viewer);
    const names = await viewer.getByTestId('kb-name').allTextContents();
    assert.ok(names.includes('ops-runbooks') && names.includes(HOSTILE), names.join());
    assert.ok(!names.includes('hr-private'), 'a knowledge base the viewer may not read is not listed');
    for (const control of ['kb-sync', 'kb-edit-readers', 'kb-remove', 'kb-add-form', 'kb-root']) {
      assert.equal(await viewer.getByTestId(control).count(), 0, `no ${control} for a viewer`);
    }
    await expectText(viewer.getByTestId('kb-row').filter({ hasText: HOSTILE }).getByTestId('kb-synced'), 'never');
    await viewer.getByTestId('search-query').fill('salary');
    await viewer.getByTestId('search-submit').click();
    await expectText(viewer.getByTestId('search-status'), 'No passage matches.');
    // A passage the viewer may not read answers 404, and the viewer says so.
    await viewer.evaluate(() => import('/assets/passage.js').then((module) => module.openPassage(301)));
    await expectText(viewer.getByTestId('passage-error'), 'does not exist any more, or you may not read it');
    await viewer.keyboard.press('Escape');
    // Admin screens named in the address are not there for a viewer.
    await viewer.evaluate(() => { window.location.hash = '#/users'; });
    await viewer.getByTestId('composer').waitFor();
    assert.equal(await viewer.getByTestId('users').count(), 0);
    await assertInert(viewer);
    await viewer.screenshot({ path: join(harness.artifacts, 'viewer.png') });

    await signIn(operator, harness, OPERATOR);
    await openKnowledge(operator);
    assert.ok(await row(operator, 'ops-runbooks').getByTestId('kb-sync').isVisible());
    for (const control of ['kb-edit-readers', 'kb-remove', 'kb-add-form', 'kb-root']) {
      assert.equal(await operator.getByTestId(control).count(), 0, `no ${control} for an operator`);
    }
    assertNoProblems(harness);
  } finally {
    harness.mock.state.admin.kbs.delete(HOSTILE);
    await viewer.close();
    await operator.close();
  }
});
