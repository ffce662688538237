// A completed diagnostic task's report, drawn for a person: the verdict and summary, the root
// cause (component, mechanism, trigger, confidence), the causal chain from trigger to impact,
// the hypotheses with their dispositions and the evidence that moved each, the recovery
// proposal, the policy decision (execution is never permitted: a person decides), failures
// the graph closed on, the plan and the budgets spent. Every evidence id is a button that
// opens that evidence's raw record. Every value from the report reaches the DOM as text nodes
// and attributes set through DOM APIs; class names built from values are reduced to tokens.

import { token } from './cards.js';
import { h, uniqueId } from './dom.js';
import { bindAttr, bindText, bindTime, hasTranslation } from './i18n.js';

/** The report's budget counters, in this order. */
const BUDGET_FIELDS = ['steps', 'toolCalls', 'modelCalls', 'replans', 'adjudications', 'repairs', 'elapsedMs'];
/** How a piece of evidence moved a hypothesis: the hypothesis field and the label's key. */
const EVIDENCE_EFFECTS = [
  ['supportingEvidence', 'supports'],
  ['refutingEvidence', 'refutes'],
  ['inactivatingEvidence', 'inactivates'],
];
const PASSING_STATUSES = /^(passed|valid|ok)$/;
const NEUTRAL_STATUSES = /^(skipped)$/;

/** The whole report of a task as one element. */
export function renderReport(report) {
  const facts = isObject(report) ? report : {};
  const evidence = new Map(list(facts.evidence).filter(isObject).map((item) => [text(item.id), item]));
  const panel = createEvidencePanel(evidence);
  return h('div', { className: 'diag-report', testid: 'diag-report', data: { verdict: token(facts.verdict) } },
    verdictSection(facts),
    rootCauseSection(facts.rootCause, panel.button),
    chainSection(facts.rootCause, panel.button),
    hypothesesSection(facts.hypotheses, evidence, panel.button),
    recoverySection(facts.recovery),
    policySection(facts),
    failuresSection(facts.failures),
    planSection(facts.plan),
    budgetsSection(facts.budgets),
    panel.element);
}

/**
 * Sets an element's text to the translation of `${prefix}.${value}`, or to the value itself
 * when that has none (a value this UI does not know yet still shows).
 */
export function labelled(element, prefix, value) {
  const key = `${prefix}.${token(value)}`;
  if (hasTranslation(key)) bindText(element, key);
  else element.textContent = text(value) || '—';
  return element;
}

/** A hypothesis disposition as a coloured badge. */
export function dispositionBadge(disposition) {
  return labelled(h('span', { className: 'badge diag-disposition', testid: 'diag-disposition', data: { value: token(disposition) } }),
    'diag.disposition', disposition);
}

/** The execution decision, said plainly: "No — a person decides" unless it was permitted. */
export function executionFlag(permitted) {
  const flag = h('strong', { className: 'flag diag-execution-flag', testid: 'diag-execution-value', data: { value: String(permitted) } });
  if (permitted === false) {
    flag.classList.add('flag-safe');
    return bindText(flag, 'diag.policy.not_permitted');
  }
  flag.classList.add(permitted === true ? 'flag-alert' : 'flag-missing');
  return bindText(flag, permitted === true ? 'diag.policy.permitted' : 'card.missing');
}

/** A string, number or boolean as text; anything else as nothing. */
export function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}

export function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** An array, or an empty one for anything else. */
export function list(value) {
  return Array.isArray(value) ? value : [];
}

// --- Sections -----------------------------------------------------------------------------------

function section(name, titleKey, ...body) {
  return h('section', { className: `diag-section diag-${name}`, testid: `diag-${name}` },
    bindText(h('h2', { className: 'diag-section-title' }), titleKey), ...body);
}

function verdictSection(report) {
  const verdict = labelled(h('strong', { className: 'diag-verdict-label', testid: 'diag-verdict-label' }), 'diag.verdict', report.verdict);
  return h('section', { className: 'diag-section diag-verdict', testid: 'diag-verdict', data: { verdict: token(report.verdict) } },
    verdict,
    text(report.summary) ? h('p', { className: 'diag-summary', testid: 'diag-summary', text: text(report.summary) }) : null);
}

function rootCauseSection(rootCause, evidenceButton) {
  if (!isObject(rootCause)) return null;
  const trigger = isObject(rootCause.trigger) ? rootCause.trigger : {};
  const triggerValue = h('span', { className: 'diag-trigger', testid: 'diag-trigger' },
    labelled(h('span', { className: 'diag-trigger-kind' }), 'diag.trigger', trigger.kind),
    text(trigger.ref) ? h('code', { className: 'diag-trigger-ref', text: text(trigger.ref) }) : null);
  return section('root-cause', 'diag.root_cause.title', facts([
    ['diag.field.component', h('span', { testid: 'diag-component', text: text(rootCause.component) || '—' })],
    ['diag.field.mechanism', h('span', { testid: 'diag-mechanism', text: text(rootCause.mechanism) || '—' })],
    ['diag.field.trigger', triggerValue],
    ['diag.field.confidence', h('span', { testid: 'diag-confidence', text: percent(rootCause.confidence) })],
    ['diag.field.evidence', evidenceList(rootCause.evidenceIds, evidenceButton)],
  ]));
}

function chainSection(rootCause, evidenceButton) {
  const links = isObject(rootCause) ? list(rootCause.causalChain).filter(isObject) : [];
  if (links.length === 0) {
    return section('chain', 'diag.chain.title', bindText(h('p', { className: 'diag-note' }), 'diag.chain.none'));
  }
  const items = links.map((link) => h('li', { className: 'diag-chain-link', testid: 'diag-chain-link', data: { role: token(link.role) } },
    labelled(h('span', { className: 'diag-role', testid: 'diag-chain-role' }), 'diag.role', link.role),
    h('p', { className: 'diag-chain-summary', text: text(link.summary) }),
    evidenceList(link.evidenceIds, evidenceButton)));
  return section('chain', 'diag.chain.title', h('ol', { className: 'diag-chain-list' }, items));
}

function hypothesesSection(hypotheses, evidence, evidenceButton) {
  const rows = list(hypotheses).filter(isObject);
  if (rows.length === 0) return section('hypotheses', 'diag.hypotheses.title', bindText(h('p', { className: 'diag-note' }), 'diag.hypotheses.none'));
  const head = h('tr', {}, ['diag.hypotheses.hypothesis', 'diag.hypotheses.disposition', 'diag.hypotheses.reason', 'diag.hypotheses.moved_by']
    .map((key) => bindText(h('th', { attrs: { scope: 'col' } }), key)));
  const body = rows.map((hypothesis) => h('tr', { className: 'diag-hypothesis', testid: 'diag-hypothesis', data: { disposition: token(hypothesis.disposition) } },
    cell('diag.hypotheses.hypothesis',
      h('strong', { className: 'diag-hypothesis-title', text: text(hypothesis.title) }),
      h('span', { className: 'diag-hypothesis-meta' },
        h('code', { text: text(hypothesis.id) }),
        text(hypothesis.component) ? h('span', { text: ` · ${text(hypothesis.component)}` }) : null)),
    cell('diag.hypotheses.disposition', dispositionBadge(hypothesis.disposition)),
    cell('diag.hypotheses.reason', h('span', { className: 'diag-reason', text: text(hypothesis.reason) })),
    cell('diag.hypotheses.moved_by', movedBy(hypothesis, evidence, evidenceButton))));
  const table = h('table', { className: 'diag-table diag-hypotheses-table' }, h('thead', {}, head), h('tbody', {}, body));
  return section('hypotheses', 'diag.hypotheses.title', table);
}

/** A table cell that names its column (narrow layouts stack the cells under their names). */
function cell(labelKey, ...children) {
  return bindAttr(h('td', {}, h('div', { className: 'diag-cell' }, ...children)), 'data-label', labelKey);
}

/** The evidence that supported, refuted or inactivated a hypothesis, with each one's role. */
function movedBy(hypothesis, evidence, evidenceButton) {
  const groups = EVIDENCE_EFFECTS.map(([field, effect]) => {
    const ids = list(hypothesis[field]).map(text).filter(Boolean);
    if (ids.length === 0) return null;
    const chips = ids.map((id) => h('li', { className: 'diag-moved-item' },
      evidenceButton(id),
      evidence.has(id) ? labelled(h('span', { className: 'diag-role diag-role-small', data: { role: token(evidence.get(id).role) } }), 'diag.role', evidence.get(id).role) : null));
    return h('div', { className: 'diag-moved', testid: 'diag-moved-by', data: { effect } },
      bindText(h('span', { className: 'diag-moved-label' }), `diag.effect.${effect}`),
      h('ul', { className: 'diag-moved-list' }, chips));
  }).filter(Boolean);
  const findings = list(hypothesis.findings).filter(isObject).map((finding) => h('li', { className: 'diag-finding', testid: 'diag-finding' },
    labelled(h('span', { className: 'diag-role diag-role-small', data: { role: token(finding.role) } }), 'diag.role', finding.role),
    ' ',
    h('span', { text: text(finding.summary) }),
    text(finding.step) ? h('code', { className: 'diag-finding-step', text: text(finding.step) }) : null));
  if (groups.length === 0 && findings.length === 0) return bindText(h('span', { className: 'diag-note' }), 'diag.hypotheses.no_evidence');
  return h('div', { className: 'diag-moved-box' }, groups, findings.length > 0 ? h('ul', { className: 'diag-findings' }, findings) : null);
}

function recoverySection(recovery) {
  const shown = isObject(recovery) ? recovery : {};
  const proposal = isObject(shown.proposal) ? shown.proposal : null;
  const mode = labelled(h('span', { className: 'badge diag-mode', testid: 'diag-recovery-mode', data: { value: token(shown.mode) } }), 'diag.mode', shown.mode);
  const rows = [['diag.field.mode', mode]];
  if (proposal) {
    rows.push(['diag.field.action', h('span', { text: text(proposal.action) || '—' })]);
    rows.push(['diag.field.proposal', h('span', { testid: 'diag-proposal-summary', text: text(proposal.summary) || '—' })]);
    rows.push(['diag.field.change_ref', h('code', { testid: 'diag-change-ref', text: text(proposal.changeRef) || '—' })]);
  }
  rows.push(['diag.field.reason', h('span', { testid: 'diag-recovery-reason', text: text(shown.reason) || '—' })]);
  return section('recovery', 'diag.recovery.title',
    proposal ? null : bindText(h('p', { className: 'diag-note', testid: 'diag-no-proposal' }), 'diag.recovery.none'),
    facts(rows),
    bindText(h('p', { className: 'diag-note' }), 'diag.recovery.never_automatic'));
}

function policySection(report) {
  const policy = isObject(report.policy) ? report.policy : {};
  const validation = isObject(report.validation) ? report.validation : {};
  const deterministic = isObject(validation.deterministic) ? validation.deterministic : {};
  const llm = isObject(validation.llm) ? validation.llm : {};
  const permitted = policy.executionPermitted === true || report.executionPermitted === true
    ? true
    : (policy.executionPermitted === false || report.executionPermitted === false ? false : undefined);
  const execution = h('div', { className: 'diag-execution', testid: 'diag-execution', data: { permitted: String(permitted) } },
    bindText(h('span', { className: 'diag-execution-label' }), 'diag.policy.execution'),
    executionFlag(permitted));
  const problems = list(deterministic.problems).map(text).filter(Boolean);
  return section('policy', 'diag.policy.title', execution, facts([
    ['diag.field.reason', h('span', { testid: 'diag-policy-reason', text: text(policy.reason) || '—' })],
    ['diag.field.mode', labelled(h('span', { testid: 'diag-policy-mode' }), 'diag.mode', policy.recoveryMode ?? report.recoveryMode)],
    ['diag.field.human_approval', bindText(h('span', {}), report.humanApprovalRequired === false ? 'common.no' : 'common.yes')],
    ['diag.field.validation_origin', labelled(h('span', { testid: 'diag-validation-origin' }), 'diag.origin', validation.validationOrigin ?? report.validationOrigin)],
    ['diag.field.validator_status', statusFlag(report.validatorStatus, 'diag-validator-status')],
    ['diag.field.deterministic', h('span', {}, statusFlag(deterministic.status),
      problems.length > 0 ? h('ul', { className: 'diag-problems', testid: 'diag-problems' }, problems.map((problem) => h('li', { text: problem }))) : null)],
    ['diag.field.llm_check', h('span', {}, statusFlag(llm.status), text(llm.reason) ? h('span', { className: 'diag-llm-reason', text: ` ${text(llm.reason)}` }) : null)],
  ]));
}

function failuresSection(failures) {
  const rows = list(failures).filter(isObject);
  if (rows.length === 0) return null;
  const head = h('tr', {}, ['diag.failures.stage', 'diag.failures.class', 'diag.failures.model']
    .map((key) => bindText(h('th', { attrs: { scope: 'col' } }), key)));
  const body = rows.map((failure) => h('tr', { testid: 'diag-failure', data: { stage: token(failure.stage), class: token(failure.class) } },
    cell('diag.failures.stage', labelled(h('span'), 'diag.node', failure.stage), h('code', { className: 'diag-code-aside', text: text(failure.stage) })),
    cell('diag.failures.class', h('code', { text: text(failure.class) })),
    cell('diag.failures.model', h('span', { text: text(failure.model) || '—' }))));
  return section('failures', 'diag.failures.title',
    bindText(h('p', { className: 'diag-note' }), 'diag.failures.intro'),
    h('table', { className: 'diag-table' }, h('thead', {}, head), h('tbody', {}, body)));
}

function planSection(plan) {
  const steps = list(plan).filter(isObject);
  if (steps.length === 0) return null;
  const head = h('tr', {}, ['diag.plan.order', 'diag.plan.test', 'diag.plan.tool', 'diag.plan.tests', 'diag.plan.status']
    .map((key) => bindText(h('th', { attrs: { scope: 'col' } }), key)));
  const body = steps.map((step) => h('tr', { testid: 'diag-plan-step', data: { status: token(step.status) } },
    cell('diag.plan.order', h('span', { text: text(step.order) })),
    cell('diag.plan.test', h('span', { text: text(step.test) }), text(step.origin) === 'replanner' ? bindText(h('span', { className: 'diag-origin-tag' }), 'diag.plan.replanned') : null),
    cell('diag.plan.tool', h('code', { text: text(step.tool) })),
    cell('diag.plan.tests', h('span', { text: list(step.testsHypotheses).map(text).join(', ') })),
    cell('diag.plan.status', labelled(h('span', { className: 'diag-step-status' }), 'diag.step_status', step.status))));
  const summary = bindText(h('summary', { className: 'diag-section-title' }), 'diag.plan.title', { count: steps.length });
  return h('details', { className: 'diag-section diag-plan', testid: 'diag-plan' }, summary,
    h('table', { className: 'diag-table' }, h('thead', {}, head), h('tbody', {}, body)));
}

function budgetsSection(budgets) {
  if (!isObject(budgets)) return null;
  return section('budgets', 'diag.budgets.title', facts(BUDGET_FIELDS.filter((key) => key in budgets).map((key) => [
    `diag.budget.${key}`,
    h('span', { data: { budget: key }, text: key === 'elapsedMs' ? seconds(budgets[key]) : text(budgets[key]) }),
  ])));
}

// --- Evidence -----------------------------------------------------------------------------------

/**
 * One panel per report showing the evidence whose id was clicked, moved under the section
 * the click came from. Returns {element, button(id)}.
 */
function createEvidencePanel(evidence) {
  const panelId = uniqueId('evidence');
  const element = h('aside', { className: 'diag-evidence', id: panelId, testid: 'diag-evidence-panel', hidden: true, attrs: { tabindex: '-1' } });
  bindAttr(element, 'aria-label', 'diag.evidence.panel');
  const buttons = [];
  let openId = null;
  let opener = null;

  const sync = () => {
    for (const other of buttons) other.setAttribute('aria-expanded', String(!element.hidden && other.dataset.evidenceId === openId));
  };
  const close = () => {
    element.hidden = true;
    openId = null;
    sync();
    if (opener?.isConnected) opener.focus();
    opener = null;
  };
  const open = (id, button) => {
    if (openId === id && !element.hidden) {
      close();
      return;
    }
    openId = id;
    opener = button;
    fillEvidence(element, id, evidence.get(id), close);
    (button.closest('.diag-section') ?? button.parentElement).after(element);
    element.hidden = false;
    sync();
    element.focus({ preventScroll: true });
    element.scrollIntoView({ block: 'nearest' });
  };
  const button = (id) => {
    const ref = h('button', {
      type: 'button',
      className: 'evidence-ref',
      testid: 'diag-evidence-ref',
      data: { evidenceId: id },
      text: id,
      attrs: { 'aria-controls': panelId, 'aria-expanded': 'false' },
    });
    ref.addEventListener('click', () => open(id, ref));
    buttons.push(ref);
    bindAttr(ref, 'title', 'diag.evidence.open', { id });
    return ref;
  };
  return { element, button };
}

function fillEvidence(panel, id, item, close) {
  panel.dataset.evidenceId = id;
  const closeButton = h('button', { type: 'button', className: 'icon-button diag-evidence-close', testid: 'diag-evidence-close', on: { click: close } },
    h('span', { attrs: { 'aria-hidden': 'true' }, text: '×' }));
  bindAttr(closeButton, 'aria-label', 'diag.evidence.close');
  const header = h('header', { className: 'diag-evidence-header' },
    bindText(h('span', { className: 'card-kind' }), 'diag.evidence.title'),
    h('code', { className: 'diag-evidence-id', testid: 'diag-evidence-id', text: id }),
    closeButton);
  if (!item) {
    panel.replaceChildren(header, bindText(h('p', { className: 'diag-note', testid: 'diag-evidence-missing' }), 'diag.evidence.missing', { id }));
    return;
  }
  const ts = typeof item.ts === 'number' && Number.isFinite(item.ts) ? bindTime(h('time'), item.ts > 1e12 ? Math.floor(item.ts / 1000) : item.ts) : h('span', { text: '—' });
  const moved = [['supports', item.supports], ['refutes', item.refutes], ['inactivates', item.inactivates]]
    .filter(([, ids]) => list(ids).length > 0)
    .map(([effect, ids]) => [`diag.effect.${effect}`, h('span', { text: list(ids).map(text).join(', ') })]);
  panel.replaceChildren(header, facts([
    ['diag.field.summary', h('span', { testid: 'diag-evidence-summary', text: text(item.summary) || '—' })],
    ['diag.field.tool', h('code', { text: text(item.tool) || '—' })],
    ['diag.field.source', h('span', { text: text(item.source) || '—' })],
    ['diag.field.step', h('code', { text: text(item.step) || '—' })],
    ['diag.field.time', ts],
    ['diag.field.role', labelled(h('span'), 'diag.role', item.role)],
    ['diag.field.in_window', bindText(h('span'), item.inWindow === true ? 'common.yes' : 'common.no')],
    ...moved,
  ]),
  bindText(h('p', { className: 'diag-evidence-raw-label' }), 'diag.evidence.raw'),
  h('pre', { className: 'diag-evidence-raw', testid: 'diag-evidence-raw', text: text(item.raw) }));
}

// --- Small parts --------------------------------------------------------------------------------

function facts(rows) {
  return h('dl', { className: 'facts' }, rows.map(([key, value]) => h('div', { className: 'fact', data: { field: key.split('.').pop() } },
    bindText(h('dt'), key), h('dd', {}, value))));
}

function evidenceList(ids, evidenceButton) {
  const values = list(ids).map(text).filter(Boolean);
  if (values.length === 0) return h('span', { className: 'fact-empty', text: '—' });
  return h('ul', { className: 'diag-evidence-list' }, values.map((id) => h('li', {}, evidenceButton(id))));
}

function statusFlag(status, testid) {
  const value = text(status);
  if (!value) return h('span', { className: 'fact-empty', testid, text: '—' });
  const tone = PASSING_STATUSES.test(value) ? 'safe' : NEUTRAL_STATUSES.test(value) ? 'neutral' : 'alert';
  return labelled(h('span', { className: `flag flag-${tone}`, testid, data: { value: token(value) } }), 'diag.check', value);
}

function percent(value) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return '—';
  return `${Math.round(Math.min(1, Math.max(0, value)) * 100)}%`;
}

function seconds(milliseconds) {
  if (typeof milliseconds !== 'number' || !Number.isFinite(milliseconds)) return '—';
  return `${(milliseconds / 1000).toFixed(1)} s`;
}
