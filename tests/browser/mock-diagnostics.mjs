// The mock server's diagnostic scenarios: the incidents it knows and, for each, the public
// events a diagnostic run streams (`run.started`, `diagnostic.node`, `tool.started`,
// `tool.completed`) and the report stored when the graph finishes — shaped like the real
// server's (`src/diagnostics/report.rs`, `src/diagnostics/driver.rs`). Which scenario plays
// depends on the incident:
//
//   incident_checkout-db   a root cause: deploy → pool exhaustion → timeouts, a rollback proposal
//   incident_search-lag    fail-closed: model and tool failures, insufficient evidence, manual review
//   incident_xss-probe     the root cause again, with HTML in titles, summaries and raw evidence
//   incident_graph-crash   the run fails after planning, leaving no report

/** The hostile text of the diagnostic scenarios (the spelling the UI tests look for). */
export const HOSTILE_EVIDENCE = '<img src=x onerror=window.__xss=1>';
const MODEL = 'qwen2.5-7b-instruct';

/** Every incident of the mock, newest first, as `GET /api/incidents` lists them. */
export function mockIncidents() {
  return [
    incident('incident_checkout-db', 'Checkout latency above SLO', 'checkout', 'critical', 'firing', 1_760_000_000),
    incident('incident_search-lag', 'Search index lagging behind writes', 'search', 'warning', 'firing', 1_759_990_000),
    incident('incident_xss-probe', `Probe ${HOSTILE_EVIDENCE} incident`, 'probe', 'info', 'open', 1_759_980_000),
    incident('incident_graph-crash', 'Billing export stalled', 'billing', 'warning', 'resolved', 1_759_970_000),
  ];
}

/**
 * What a diagnostic of `incidentId` does: {steps: [[type, data]…], outcome: 'completed' |
 * 'failed', report (null when failed), reason (when failed)}. `taskId` is stamped on events
 * and evidence.
 */
export function diagnosticScenario(incidentId, taskId) {
  switch (incidentId) {
    case 'incident_search-lag':
      return failClosed(taskId);
    case 'incident_graph-crash':
      return crashed(taskId);
    default:
      return rootCause(taskId, incidentId === 'incident_xss-probe');
  }
}

function incident(id, title, service, severity, status, startsAt) {
  return {
    id, fingerprint: null, title, service, severity, status,
    labels: { team: 'platform' }, annotations: {},
    starts_at: startsAt, ends_at: status === 'resolved' ? startsAt + 3600 : null,
    created_at: startsAt + 5, updated_at: startsAt + 300,
  };
}

// --- Building blocks ----------------------------------------------------------------------------

function node(taskId, name, iteration, next, summary, detail = {}) {
  return ['diagnostic.node', { task_id: taskId, node: name, iteration, next, summary, detail }];
}

function tool(callId, name, status, summary) {
  return [['tool.started', { call_id: callId, name }], ['tool.completed', { call_id: callId, name, status, summary }]];
}

function planStep(id, order, test, toolName, hypotheses, intent, origin = 'planner', status = 'done') {
  return {
    id, order, test, tool: toolName, arguments: { window: 'incident' }, testsHypotheses: hypotheses,
    causalIntent: intent, sourceDomain: toolName === 'list_changes' ? 'change' : toolName === 'search_logs' ? 'log' : 'runtime',
    targetComponent: 'checkout-db', origin, status,
  };
}

function evidence(taskId, id, step, toolName, source, role, raw, summary, moved, inWindow = true) {
  return {
    id, taskId, step, tool: toolName, source, ts: 1_760_000_000 + step.length * 60, raw, summary, role, inWindow,
    supports: moved.supports ?? [], refutes: moved.refutes ?? [], inactivates: moved.inactivates ?? [],
  };
}

function publicHypotheses(hypotheses) {
  return hypotheses.map(({ id, title, disposition, reason }) => ({ id, title, disposition, reason }));
}

/** The report's `nodes` record, from the scenario's node events. */
function nodesOf(steps, taskId) {
  return steps.filter(([type]) => type === 'diagnostic.node')
    .map(([, data]) => ({ node: data.node, iteration: data.iteration, executionKey: `${taskId}:${data.node}:${data.iteration}` }));
}

function report(taskId, incidentId, parts) {
  return {
    component: parts.rootCause?.component ?? null,
    mechanism: parts.rootCause?.mechanism ?? null,
    recoveryMode: parts.policy.recoveryMode,
    executionPermitted: false,
    humanApprovalRequired: true,
    validatorStatus: parts.validatorStatus,
    validationOrigin: parts.validation.validationOrigin,
    evidenceIds: parts.rootCause?.evidenceIds ?? [],
    taskId,
    incidentId,
    graphVersion: 'diag-graph-v1',
    threadId: `warden:${taskId}:diag-graph-v1`,
    verdict: parts.verdict,
    rootCause: parts.rootCause,
    hypotheses: parts.hypotheses,
    plan: parts.plan,
    observations: parts.observations,
    evidence: parts.evidence,
    knowledge: [{ kb: 'ops-runbooks', title: 'Database connection pools', path: 'db/pools.md', score: 0.71 }],
    recovery: parts.recovery,
    validation: parts.validation,
    policy: parts.policy,
    failures: parts.failures,
    budgets: parts.budgets,
    recoveryExecuted: false,
    summary: parts.summary,
    nodes: parts.nodes,
  };
}

// --- Scenarios ----------------------------------------------------------------------------------

function rootCause(taskId, hostile) {
  const incidentId = hostile ? 'incident_xss-probe' : 'incident_checkout-db';
  const mark = (text) => (hostile ? `${text} ${HOSTILE_EVIDENCE}` : text);
  const ev = [
    evidence(taskId, 'ev_deploy_1', 'step-1', 'list_changes', 'change-log', 'trigger',
      'chg-4127 deploy checkout-api v2.14.0 at 09:58:12Z (workers 8 -> 16)',
      'Deploy chg-4127 doubled the checkout-api workers two minutes before the alert', { supports: ['H1'] }),
    evidence(taskId, 'ev_metrics_2', 'step-2', 'query_metrics', 'prometheus', 'mechanism',
      'pg_pool_active{db="checkout"} 100/100 from 10:00:05Z; pg_pool_waiting 240',
      'The connection pool saturated at 100/100 with 240 requests waiting', { supports: ['H1'] }),
    evidence(taskId, 'ev_logs_3', 'step-3', 'search_logs', 'loki', 'impact',
      hostile ? HOSTILE_EVIDENCE : 'ERROR checkout-api: timeout acquiring connection after 5000ms (x1843)',
      mark('1843 connection-acquire timeouts in checkout-api'), { supports: ['H1'] }),
    evidence(taskId, 'ev_locks_4', 'step-2', 'query_metrics', 'prometheus', 'context',
      'pg_locks_waiting{db="checkout"} max 0 between 09:55Z and 10:20Z',
      'No lock waits during the incident', { refutes: ['H2'] }),
    evidence(taskId, 'ev_net_5', 'step-4', 'query_metrics', 'prometheus', 'context',
      'node_network_drop_total{host="db-2"} +312 at 08:40Z, +0 after 09:00Z',
      'Packet drops on db-2 an hour before the incident, none inside it', { inactivates: ['H3'] }, false),
  ];
  const finding = (step, role, summary, ids) => ({ step, role, summary, evidenceIds: ids });
  const hypotheses = [
    {
      id: 'H1', title: mark('Connection pool exhaustion in checkout-db'), disposition: 'supported',
      reason: 'The pool saturated right after the deploy doubled the workers, and the timeouts followed',
      component: 'checkout-db', supportingEvidence: ['ev_deploy_1', 'ev_metrics_2', 'ev_logs_3'], refutingEvidence: [], inactivatingEvidence: [],
      findings: [
        finding('step-1', 'trigger', 'Deploy chg-4127 doubled the workers', ['ev_deploy_1']),
        finding('step-2', 'mechanism', 'Pool at 100/100 with requests waiting', ['ev_metrics_2']),
        finding('step-3', 'impact', 'Connection-acquire timeouts', ['ev_logs_3']),
      ],
    },
    {
      id: 'H2', title: 'Lock contention on the orders table', disposition: 'refuted',
      reason: 'No lock waits inside the incident window', component: 'checkout-db',
      supportingEvidence: [], refutingEvidence: ['ev_locks_4'], inactivatingEvidence: [],
      findings: [finding('step-2', 'context', 'No lock waits', ['ev_locks_4'])],
    },
    {
      id: 'H3', title: 'Packet loss to the database host', disposition: 'causally_inactive',
      reason: 'The drops ended an hour before the incident began', component: 'db-2',
      supportingEvidence: [], refutingEvidence: [], inactivatingEvidence: ['ev_net_5'],
      findings: [finding('step-4', 'context', 'Drops outside the window', ['ev_net_5'])],
    },
    {
      id: 'H4', title: 'Cache eviction storm', disposition: 'unresolved',
      reason: 'Not tested: the stronger hypotheses settled the question first', component: 'checkout-cache',
      supportingEvidence: [], refutingEvidence: [], inactivatingEvidence: [], findings: [],
    },
  ];
  const plan = [
    planStep('step-1', 1, 'Changes shortly before the alert', 'list_changes', ['H1'], 'trigger'),
    planStep('step-2', 2, 'Pool and lock saturation', 'query_metrics', ['H1', 'H2'], 'mechanism'),
    planStep('step-3', 3, 'Timeouts in the service logs', 'search_logs', ['H1'], 'impact', 'replanner'),
    planStep('step-4', 4, 'Network drops to the database', 'query_metrics', ['H3'], 'context', 'replanner'),
  ];
  const rootCauseFacts = {
    component: 'checkout-db',
    mechanism: 'Connection pool exhausted after deploy chg-4127 doubled the worker count',
    trigger: { kind: 'deploy', ref: 'chg-4127' },
    causalChain: [
      { role: 'trigger', summary: 'Deploy chg-4127 doubled the checkout-api workers (8 → 16)', evidenceIds: ['ev_deploy_1'] },
      { role: 'mechanism', summary: 'The checkout-db connection pool saturated at 100/100', evidenceIds: ['ev_metrics_2'] },
      { role: 'impact', summary: mark('Requests timed out waiting for a connection'), evidenceIds: ['ev_logs_3'] },
    ],
    confidence: 0.86,
    evidenceIds: ['ev_deploy_1', 'ev_metrics_2', 'ev_logs_3'],
  };
  const recovery = {
    mode: 'proposal_only',
    proposal: { action: 'rollback', changeRef: 'chg-4127', summary: mark('Roll back chg-4127 (checkout-api v2.14.0), or lower its workers to 8') },
    reason: 'The trigger is a reversible deploy; a rollback needs a person to approve it',
  };
  const policy = { executionPermitted: false, recoveryMode: 'proposal_only', reason: 'Warden never executes a recovery; a person decides whether to roll back' };
  const early = (disposition) => publicHypotheses(hypotheses).map((h) => ({ ...h, disposition: disposition(h.id), reason: disposition(h.id) === 'unresolved' ? 'Not tested yet' : h.reason }));
  const steps = [
    node(taskId, 'knowledge_investigator', 0, 'planner', mark('2 runbook passages; 4 hypotheses'), { hypotheses: early(() => 'unresolved') }),
    node(taskId, 'planner', 0, 'strategy_router', '2 steps planned', { plan: plan.slice(0, 2).map((s) => ({ ...s, status: 'pending' })) }),
    node(taskId, 'strategy_router', 0, 'executor', 'Next: step-1 (list_changes)'),
    ...tool(`${taskId}-call-1`, 'list_changes', 'ok', '1 deploy in the window'),
    node(taskId, 'executor', 0, 'fact_adapter', 'step-1 done: 1 record'),
    node(taskId, 'fact_adapter', 0, 'sufficiency_gate', 'H1 gains a trigger', { hypotheses: early(() => 'unresolved') }),
    node(taskId, 'sufficiency_gate', 0, 'strategy_router', 'Not enough yet: H1 lacks a mechanism'),
    node(taskId, 'strategy_router', 1, 'executor', 'Next: step-2 (query_metrics)'),
    ...tool(`${taskId}-call-2`, 'query_metrics', 'ok', 'pool saturated; no lock waits'),
    node(taskId, 'executor', 1, 'fact_adapter', 'step-2 done: 2 records'),
    node(taskId, 'fact_adapter', 1, 'sufficiency_gate', 'H1 gains a mechanism; H2 refuted',
      { hypotheses: early((id) => (id === 'H2' ? 'refuted' : 'unresolved')) }),
    node(taskId, 'sufficiency_gate', 1, 'replanner', 'H1 needs an impact; H3 is untested'),
    node(taskId, 'replanner', 0, 'strategy_router', '2 steps added', { plan: plan.map((s, i) => ({ ...s, status: i < 2 ? 'done' : 'pending' })) }),
    node(taskId, 'strategy_router', 2, 'executor', 'Next: step-3 (search_logs)'),
    ...tool(`${taskId}-call-3`, 'search_logs', 'ok', mark('1843 timeouts')),
    node(taskId, 'executor', 2, 'fact_adapter', 'step-3 done: 1 record'),
    node(taskId, 'strategy_router', 3, 'executor', 'Next: step-4 (query_metrics)'),
    ...tool(`${taskId}-call-4`, 'query_metrics', 'ok', 'drops before the window only'),
    node(taskId, 'executor', 3, 'fact_adapter', 'step-4 done: 1 record'),
    node(taskId, 'fact_adapter', 2, 'sufficiency_gate', 'H1 supported; H3 causally inactive', { hypotheses: publicHypotheses(hypotheses) }),
    node(taskId, 'sufficiency_gate', 2, 'decision', 'Enough evidence to decide'),
    node(taskId, 'decision', 0, 'deterministic_validator', 'Root cause: checkout-db pool exhaustion', { verdict: 'root_cause', rootCause: rootCauseFacts }),
    node(taskId, 'deterministic_validator', 0, 'recovery_planner', 'Every link cites in-window evidence'),
    node(taskId, 'recovery_planner', 0, 'validator_router', 'Proposal: roll back chg-4127', { recovery }),
    node(taskId, 'validator_router', 0, 'llm_validator', 'Model validation available'),
    node(taskId, 'llm_validator', 0, 'policy_gate', 'The model found the chain consistent'),
    node(taskId, 'policy_gate', 0, 'report', 'Execution not permitted: proposal only', { policy }),
    node(taskId, 'report', 0, 'end', 'Report stored'),
  ];
  return {
    steps,
    outcome: 'completed',
    report: report(taskId, incidentId, {
      verdict: 'root_cause', rootCause: rootCauseFacts, hypotheses, plan, evidence: ev,
      observations: plan.map((s, i) => ({ step: s.id, tool: s.tool, status: 'ok', evidenceIds: ev.filter((e) => e.step === s.id).map((e) => e.id), evaluation: `step ${i + 1} evaluated` })),
      recovery, policy,
      validation: { deterministic: { status: 'passed', problems: [] }, llm: { status: 'valid', reason: 'Each link cites in-window evidence' }, validationOrigin: 'llm_validated' },
      validatorStatus: 'valid',
      failures: [],
      budgets: { replans: 1, modelCalls: 5, toolCalls: 4, steps: 4, adjudications: 0, repairs: 0, elapsedMs: 8421 },
      summary: mark('checkout-db ran out of connections after deploy chg-4127 doubled the checkout-api workers; requests timed out waiting for a connection.'),
      nodes: nodesOf(steps, taskId),
    }),
  };
}

function failClosed(taskId) {
  const ev = [
    evidence(taskId, 'ev_lag_1', 'step-1', 'query_metrics', 'prometheus', 'impact',
      'search_index_lag_seconds{index="products"} 940', 'The products index lags 940 s behind writes', { supports: ['H1', 'H2'] }),
  ];
  const hypotheses = [
    {
      id: 'H1', title: 'Indexer workers starved of CPU', disposition: 'unresolved', reason: 'Only the impact is observed; no mechanism evidence',
      component: 'search-indexer', supportingEvidence: ['ev_lag_1'], refutingEvidence: [], inactivatingEvidence: [],
      findings: [{ step: 'step-1', role: 'impact', summary: 'Index lag of 940 s', evidenceIds: ['ev_lag_1'] }],
    },
    {
      id: 'H2', title: 'Write burst from the catalogue import', disposition: 'unresolved', reason: 'The import log could not be read',
      component: 'catalogue-import', supportingEvidence: ['ev_lag_1'], refutingEvidence: [], inactivatingEvidence: [],
      findings: [{ step: 'step-1', role: 'impact', summary: 'Index lag of 940 s', evidenceIds: ['ev_lag_1'] }],
    },
  ];
  const plan = [
    planStep('step-1', 1, 'Index lag and indexer CPU', 'query_metrics', ['H1', 'H2'], 'impact'),
    planStep('step-2', 2, 'Catalogue import log', 'search_logs', ['H2'], 'trigger', 'planner', 'failed'),
  ];
  const recovery = { mode: 'manual_review', proposal: null, reason: 'The evidence does not name a cause; a person reviews the incident' };
  const policy = { executionPermitted: false, recoveryMode: 'manual_review', reason: 'Insufficient evidence: nothing is proposed, a person reviews' };
  const failures = [
    { stage: 'planner', class: 'bad_json', model: MODEL },
    { stage: 'executor', class: 'tool_error', model: '' },
    { stage: 'llm_validator', class: 'unavailable', model: MODEL },
  ];
  const steps = [
    node(taskId, 'knowledge_investigator', 0, 'planner', '1 runbook passage; 2 hypotheses', { hypotheses: publicHypotheses(hypotheses) }),
    node(taskId, 'planner', 0, 'strategy_router', 'The model answered bad JSON; the playbook plan is used', { plan }),
    node(taskId, 'strategy_router', 0, 'executor', 'Next: step-1 (query_metrics)'),
    ...tool(`${taskId}-call-1`, 'query_metrics', 'ok', 'index lag 940 s'),
    node(taskId, 'executor', 0, 'fact_adapter', 'step-1 done: 1 record'),
    node(taskId, 'strategy_router', 1, 'executor', 'Next: step-2 (search_logs)'),
    ...tool(`${taskId}-call-2`, 'search_logs', 'error', 'the log store did not answer'),
    node(taskId, 'executor', 1, 'fact_adapter', 'step-2 failed: tool error'),
    node(taskId, 'fact_adapter', 0, 'sufficiency_gate', 'Both hypotheses remain unresolved', { hypotheses: publicHypotheses(hypotheses) }),
    node(taskId, 'sufficiency_gate', 0, 'hypothesis_adjudicator', 'No hypothesis can be decided'),
    node(taskId, 'hypothesis_adjudicator', 0, 'decision', 'Nothing to favour', { hypotheses: publicHypotheses(hypotheses) }),
    node(taskId, 'decision', 0, 'deterministic_validator', 'Insufficient evidence', { verdict: 'insufficient_evidence', rootCause: null }),
    node(taskId, 'deterministic_validator', 0, 'manual_review', 'No cause to validate'),
    node(taskId, 'manual_review', 0, 'policy_gate', 'A person reviews the incident', { recovery }),
    node(taskId, 'policy_gate', 0, 'report', 'Execution not permitted: manual review', { policy }),
    node(taskId, 'report', 0, 'end', 'Report stored'),
  ];
  return {
    steps,
    outcome: 'completed',
    report: report(taskId, 'incident_search-lag', {
      verdict: 'insufficient_evidence', rootCause: null, hypotheses, plan, evidence: ev,
      observations: [
        { step: 'step-1', tool: 'query_metrics', status: 'ok', evidenceIds: ['ev_lag_1'], evaluation: 'lag observed' },
        { step: 'step-2', tool: 'search_logs', status: 'error', evidenceIds: [], evaluation: 'no answer' },
      ],
      recovery, policy,
      validation: {
        deterministic: { status: 'failed', problems: ['no supported hypothesis', 'the chain has no trigger'] },
        llm: { status: 'unavailable', reason: 'the validator model timed out' },
        validationOrigin: 'deterministic',
      },
      validatorStatus: 'unavailable',
      failures,
      budgets: { replans: 0, modelCalls: 3, toolCalls: 2, steps: 2, adjudications: 1, repairs: 1, elapsedMs: 15230 },
      summary: 'The evidence does not establish why the search index lags; the graph closed without naming a cause and asks for a manual review.',
      nodes: nodesOf(steps, taskId),
    }),
  };
}

function crashed(taskId) {
  return {
    steps: [
      node(taskId, 'knowledge_investigator', 0, 'planner', 'No runbook passages; 1 hypothesis', {
        hypotheses: [{ id: 'H1', title: 'Export job stuck', disposition: 'unresolved', reason: 'Not tested yet' }],
      }),
      node(taskId, 'planner', 0, 'strategy_router', '1 step planned', { plan: [planStep('step-1', 1, 'Export job state', 'query_metrics', ['H1'], 'mechanism', 'planner', 'pending')] }),
    ],
    outcome: 'failed',
    reason: 'the diagnostic worker stopped (mock failure)',
    report: null,
  };
}
