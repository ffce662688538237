// The recovery approval queue in the Diagnostics view, for operators and admins: each
// recovery request its requester confirmed, with what approving it would approve (the
// incident, the report's root cause and proposal, the exact parameters), and Approve /
// Reject. A person's own requests are listed but cannot be approved by them: someone else
// must. Every value reaches the DOM as text; nothing is executed by an approval.

import * as api from './api.js';
import { token } from './cards.js';
import { text } from './diagnostics-report.js';
import { h } from './dom.js';
import { bindText, bindTime } from './i18n.js';

const ROLES_THAT_APPROVE = new Set(['operator', 'admin']);

/** The queue's section for `user`, or null for a role that cannot approve. */
export function approvalsSection(user, isCurrent) {
  if (!ROLES_THAT_APPROVE.has(user.role)) return null;
  const list = h('ul', { className: 'diag-approvals', testid: 'diag-approvals' });
  const status = bindText(h('p', { className: 'diag-note', testid: 'diag-approvals-status' }), 'approvals.loading');
  const section = h('section', { className: 'diag-section', testid: 'diag-approvals-section' },
    bindText(h('h2', { className: 'diag-section-title' }), 'approvals.title'),
    bindText(h('p', { className: 'diag-note' }), 'approvals.intro'),
    status, list);
  load(list, status, isCurrent);
  return section;
}

async function load(list, status, isCurrent) {
  let waiting;
  try {
    waiting = await api.listApprovals();
  } catch (error) {
    if (!isCurrent()) return;
    if (error instanceof api.ApiError && error.status === 0) bindText(status, 'error.network');
    else bindText(status, 'approvals.failed');
    return;
  }
  if (!isCurrent()) return;
  list.replaceChildren(...waiting.map(approvalItem));
  status.hidden = waiting.length > 0;
  if (waiting.length === 0) bindText(status, 'approvals.empty');
}

function approvalItem(item) {
  const outcome = h('p', { className: 'diag-note', testid: 'approval-outcome', hidden: true, attrs: { role: 'status' } });
  const approve = bindText(h('button', { type: 'button', className: 'button button-primary', testid: 'approval-approve' }), 'approvals.approve');
  const reject = bindText(h('button', { type: 'button', className: 'button', testid: 'approval-reject' }), 'approvals.reject');
  const own = item.own === true;
  if (own) approve.disabled = true;
  const ownNote = own ? bindText(h('p', { className: 'diag-note', testid: 'approval-own' }), 'approvals.own') : null;
  const decide = async (decision) => {
    approve.disabled = true;
    reject.disabled = true;
    outcome.hidden = false;
    try {
      const action = await api.decideApproval(text(item.id), decision, text(item.parameters_hash));
      if (action.status === 'confirmed') bindText(outcome, 'approvals.approved', { id: text(action.result?.approval_id) });
      else if (action.status === 'rejected') bindText(outcome, 'approvals.rejected');
      else if (action.status === 'failed') bindText(outcome, 'action.result.failed', { error: text(action.result?.error) });
      else bindText(outcome, 'action.status.other', { status: text(action.status) });
    } catch (error) {
      if (!(error instanceof api.ApiError)) bindText(outcome, 'error.generic', { message: String(error) });
      else if (error.status === 0) bindText(outcome, 'error.network');
      else if (error.status === 403) bindText(outcome, 'approvals.forbidden', { message: error.message });
      else if (error.status === 409) bindText(outcome, 'action.error.conflict', { message: error.message });
      else if (error.status === 422) bindText(outcome, 'action.error.changed');
      else bindText(outcome, 'error.generic', { message: error.message });
      reject.disabled = false;
      approve.disabled = own;
    }
  };
  approve.addEventListener('click', () => decide('approve'));
  reject.addEventListener('click', () => decide('reject'));
  const created = typeof item.created_at === 'number' ? bindTime(h('time', {}), item.created_at) : null;
  return h('li', { className: 'diag-approval', testid: 'approval-item', data: { actionId: token(item.id) } },
    h('div', { className: 'diag-task-head' },
      bindText(h('span', { className: 'badge' }), 'approvals.requested_by', { name: text(item.requester) }),
      h('code', { text: text(item.incident_id) }),
      created),
    h('dl', { className: 'facts' },
      fact('approvals.task', h('code', { text: text(item.diagnostic_task_id) })),
      fact('approvals.root_cause', h('span', { testid: 'approval-root-cause', text: describeRootCause(item.root_cause) })),
      fact('approvals.proposal', h('span', { testid: 'approval-proposal', text: describeProposal(item.proposal) })),
      fact('approvals.reason', h('span', { text: text(item.reason) })),
      fact('field.parameters', h('code', { text: JSON.stringify(item.parameters ?? {}) }))),
    ownNote,
    h('div', { className: 'diag-start-row' }, approve, reject),
    outcome);
}

/** The report's root cause as one line: mechanism on component, and its trigger. */
function describeRootCause(rootCause) {
  if (!rootCause || typeof rootCause !== 'object') return '—';
  const trigger = rootCause.trigger && typeof rootCause.trigger === 'object'
    ? ` (${text(rootCause.trigger.kind)}${rootCause.trigger.ref ? ' ' + text(rootCause.trigger.ref) : ''})` : '';
  return `${text(rootCause.mechanism)} — ${text(rootCause.component)}${trigger}`;
}

/** The report's proposal as one line: what a person would do, and the change it reverts. */
function describeProposal(proposal) {
  if (!proposal || typeof proposal !== 'object') return '—';
  const change = proposal.changeRef ? ` [${text(proposal.changeRef)}]` : '';
  return `${text(proposal.summary) || text(proposal.action)}${change}`;
}

function fact(key, value) {
  return h('div', { className: 'fact' }, bindText(h('dt'), key), h('dd', {}, value));
}
