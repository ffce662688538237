// The live progress of one diagnostic task: the graph's public steps as its run streams them.
// Each finished node shows its name, its round, its one-line summary and the structured
// detail it made public (plan steps, hypothesis dispositions, the verdict, the recovery mode,
// the policy decision); each tool call shows its name, status and summary. There is no model
// text to show: a `diagnostic.node` event carries none. A step already drawn — an event
// replayed after a reconnect, a node repeated after the server resumed the graph — is redrawn
// in place, so the list never holds a step twice.

import { token } from './cards.js';
import { h } from './dom.js';
import { bindText, hasTranslation } from './i18n.js';
import { dispositionBadge, executionFlag, isObject, labelled, list, text } from './diagnostics-report.js';

/** Plan steps listed under a planner node; the rest are counted. */
const MAX_PLAN_STEPS_SHOWN = 6;

/** Creates the progress list. Returns {element, apply(event), stepCount()}. */
export function createProgress() {
  const rows = new Map();
  const steps = h('ol', { className: 'diag-steps', testid: 'diag-steps' });
  const waiting = bindText(h('p', { className: 'diag-note', testid: 'diag-steps-waiting' }), 'diag.progress.waiting');
  const element = h('section', { className: 'diag-section diag-progress', testid: 'diag-progress' },
    bindText(h('h2', { className: 'diag-section-title' }), 'diag.progress.title'), waiting, steps);

  const row = (key, kind) => {
    let item = rows.get(key);
    if (!item) {
      item = h('li', { className: `diag-step diag-step-${kind}`, testid: 'diag-step', data: { kind } });
      rows.set(key, item);
      steps.appendChild(item);
      waiting.hidden = true;
    }
    return item;
  };

  const apply = (event) => {
    const data = isObject(event.data) ? event.data : {};
    switch (event.type) {
      case 'diagnostic.node':
        drawNode(row(`node ${text(data.node)} ${text(data.iteration)}`, 'node'), data);
        return true;
      case 'tool.started':
      case 'tool.completed':
        drawTool(row(`tool ${text(data.call_id) || text(data.name)}`, 'tool'), event.type, data);
        return true;
      case 'run.resumed':
        drawResumed(row(`resumed ${text(data.attempt)}`, 'resumed'), data);
        return true;
      default:
        return false;
    }
  };

  return { element, apply, stepCount: () => rows.size };
}

/** Says that there is nothing to follow (a task without a run). */
export function noProgress(progress) {
  const note = progress.element.querySelector('[data-testid="diag-steps-waiting"]');
  if (note && progress.stepCount() === 0) bindText(note, 'diag.progress.none');
}

function drawNode(item, data) {
  const iteration = Number.isInteger(data.iteration) ? data.iteration : 0;
  item.dataset.node = token(data.node);
  item.dataset.iteration = String(iteration);
  const name = labelled(h('strong', { className: 'diag-node-name', testid: 'diag-node-name' }), 'diag.node', data.node);
  const round = bindText(h('span', { className: 'diag-round', testid: 'diag-round' }), 'diag.progress.round', { n: iteration + 1 });
  const next = text(data.next) && data.next !== 'end'
    ? h('span', { className: 'diag-next' }, h('span', { attrs: { 'aria-hidden': 'true' }, text: '→ ' }), labelled(h('span'), 'diag.node', data.next))
    : null;
  item.replaceChildren(
    h('span', { className: 'diag-step-marker', attrs: { 'aria-hidden': 'true' } }),
    h('div', { className: 'diag-step-body' },
      h('div', { className: 'diag-step-head' }, name, round, next),
      text(data.summary) ? h('p', { className: 'diag-step-summary', testid: 'diag-step-summary', text: text(data.summary) }) : null,
      nodeDetail(isObject(data.detail) ? data.detail : {})));
}

/** The public structured detail of a node, or null when it has none. */
function nodeDetail(detail) {
  if (Array.isArray(detail.plan)) return planDetail(detail.plan);
  if (Array.isArray(detail.hypotheses)) return hypothesesDetail(detail.hypotheses);
  if (isObject(detail.policy)) {
    return h('div', { className: 'diag-step-detail', testid: 'diag-step-policy' },
      executionFlag(detail.policy.executionPermitted),
      text(detail.policy.reason) ? h('span', { className: 'diag-step-reason', text: text(detail.policy.reason) }) : null);
  }
  if (isObject(detail.recovery)) {
    const proposal = isObject(detail.recovery.proposal) ? detail.recovery.proposal : null;
    return h('div', { className: 'diag-step-detail', testid: 'diag-step-recovery' },
      labelled(h('span', { className: 'badge diag-mode', data: { value: token(detail.recovery.mode) } }), 'diag.mode', detail.recovery.mode),
      proposal ? h('span', { className: 'diag-step-reason', text: text(proposal.summary) }) : null);
  }
  if ('verdict' in detail) {
    const root = isObject(detail.rootCause) ? detail.rootCause : null;
    return h('div', { className: 'diag-step-detail', testid: 'diag-step-decision' },
      labelled(h('span', { className: 'badge diag-verdict-badge', data: { value: token(detail.verdict) } }), 'diag.verdict', detail.verdict),
      root ? h('span', { className: 'diag-step-reason', text: [text(root.component), text(root.mechanism)].filter(Boolean).join(' — ') }) : null);
  }
  return null;
}

function planDetail(plan) {
  const steps = plan.filter(isObject);
  const items = steps.slice(0, MAX_PLAN_STEPS_SHOWN).map((step) => h('li', {},
    h('span', { text: text(step.test) }), ' ', h('code', { text: text(step.tool) })));
  const more = steps.length > MAX_PLAN_STEPS_SHOWN
    ? bindText(h('li', { className: 'diag-note' }), 'diag.progress.more_steps', { count: steps.length - MAX_PLAN_STEPS_SHOWN })
    : null;
  return h('ol', { className: 'diag-step-detail diag-step-plan', testid: 'diag-step-plan' }, items, more);
}

function hypothesesDetail(hypotheses) {
  const items = list(hypotheses).filter(isObject).map((hypothesis) => h('li', { data: { disposition: token(hypothesis.disposition) } },
    dispositionBadge(hypothesis.disposition), ' ', h('span', { text: text(hypothesis.title) || text(hypothesis.id) })));
  return h('ul', { className: 'diag-step-detail diag-step-hypotheses', testid: 'diag-step-hypotheses' }, items);
}

function drawTool(item, type, data) {
  const status = type === 'tool.started' ? 'running' : token(data.status);
  item.dataset.status = status;
  item.dataset.callId = text(data.call_id);
  const statusText = h('span', { className: 'tool-status' });
  bindText(statusText, hasTranslation(`tool.status.${status}`) ? `tool.status.${status}` : 'tool.status.other', { status: text(data.status) });
  item.replaceChildren(
    h('span', { className: 'diag-step-marker', attrs: { 'aria-hidden': 'true' } }),
    h('div', { className: 'diag-step-body' },
      h('div', { className: 'diag-step-head' },
        bindText(h('span', { className: 'diag-tool-label' }), 'diag.progress.tool'),
        h('code', { className: 'tool-name', testid: 'diag-tool-name', text: text(data.name) }),
        statusText),
      type === 'tool.completed' && text(data.summary) ? h('p', { className: 'diag-step-summary', text: text(data.summary) }) : null));
}

function drawResumed(item, data) {
  item.replaceChildren(
    h('span', { className: 'diag-step-marker', attrs: { 'aria-hidden': 'true' } }),
    bindText(h('p', { className: 'diag-step-summary' }), 'diag.progress.resumed', { attempt: text(data.attempt) || '2' }));
}
