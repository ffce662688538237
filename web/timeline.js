// The run timeline: a collapsible list of one run's public events (seq, type, time, detail),
// with consecutive message.delta events folded into one line; tool calls show their name,
// status and summary (events never carry a tool's arguments). A live run feeds it the events
// it is already receiving; a stored answer's replay feeds it too (`external`); otherwise a
// finished run's timeline loads its events on first open by replaying the event stream from
// the start and closing it on the terminal event.

import { h, uniqueId } from './dom.js';
import { bindText, t } from './i18n.js';
import { TERMINAL_EVENTS, followRun } from './stream.js';

/**
 * Creates a timeline for a run. With `live` set, events arrive through record(); with
 * `external` set they arrive through record() and end with finish(ok); otherwise the first
 * opening loads them. Returns {element, record(event), finish(ok), dispose()}.
 */
export function createTimeline(runId, { live = false, external = false } = {}) {
  const rows = [];
  const panelId = uniqueId('timeline');
  const list = h('ol', { className: 'timeline-list' });
  const note = h('p', { className: 'timeline-note' });
  const panel = h('div', { className: 'timeline', id: panelId, testid: 'timeline', hidden: true, attrs: { role: 'region' } }, list, note);
  const toggle = h('button', {
    type: 'button',
    className: 'timeline-toggle',
    testid: 'timeline-toggle',
    attrs: { 'aria-expanded': 'false', 'aria-controls': panelId },
  });
  bindText(toggle, 'timeline.toggle');
  panel.setAttribute('aria-label', t('timeline.label'));
  let loading = null;
  let loaded = live;

  const showNote = () => {
    if (rows.length === 0) bindText(note, loaded ? 'timeline.empty' : 'timeline.loading');
    note.hidden = rows.length > 0;
  };

  const record = (event) => {
    const last = rows[rows.length - 1];
    if (event.type === 'message.delta' && last && last.type === 'message.delta') {
      last.count += 1;
      last.chars += codePoints(event.data.text ?? '');
      last.lastSeq = event.seq;
      renderRow(last);
    } else {
      const row = newRow(event);
      rows.push(row);
      renderRow(row);
      list.appendChild(row.element);
    }
    showNote();
  };

  const load = () => {
    loading = followRun(runId, {
      after: 0,
      onEvent: (event) => {
        record(event);
        if (TERMINAL_EVENTS.has(event.type)) {
          loaded = true;
          showNote();
        }
      },
      onLost: () => {
        loaded = true;
        note.hidden = false;
        bindText(note, 'timeline.error');
      },
    });
  };

  toggle.addEventListener('click', () => {
    const open = panel.hidden;
    panel.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    toggle.classList.toggle('is-open', open);
    if (open && !loaded && !external && loading === null) load();
    showNote();
  });

  const element = h('div', { className: 'timeline-box' }, toggle, panel);
  const finish = (ok) => {
    loaded = true;
    showNote();
    if (!ok && rows.length === 0) {
      note.hidden = false;
      bindText(note, 'timeline.error');
    }
  };

  return {
    element,
    record,
    finish,
    dispose: () => loading?.close(),
  };
}

function newRow(event) {
  return {
    type: event.type,
    firstSeq: event.seq,
    lastSeq: event.seq,
    at: event.data.at,
    data: event.data,
    count: 1,
    chars: event.type === 'message.delta' ? codePoints(event.data.text ?? '') : 0,
    element: h('li', {
      className: `timeline-row timeline-${event.type.replace(/\./g, '-')}`,
      data: { type: event.type, status: event.type === 'tool.completed' ? cssToken(event.data.status) : undefined },
    }),
  };
}

function renderRow(row) {
  const seq = row.count > 1 ? `${row.firstSeq}–${row.lastSeq}` : String(row.firstSeq ?? '·');
  const type = row.count > 1 ? `${row.type} ×${row.count}` : row.type;
  const detail = h('span', { className: 'timeline-detail' });
  const description = describe(row);
  if (description) bindText(detail, description[0], description[1]);
  row.element.replaceChildren(
    h('span', { className: 'timeline-seq', text: `#${seq}` }),
    ' ',
    h('time', { className: 'timeline-time', text: clock(row.at) }),
    ' ',
    h('code', { className: 'timeline-type', text: type }),
    ' ',
    detail,
  );
}

/** The translation key and parameters of a row's detail, or null when it has none. */
function describe(row) {
  const data = row.data;
  switch (row.type) {
    case 'message.delta':
      return ['timeline.chars', { chars: row.chars }];
    case 'run.started':
      return ['timeline.attempt', { attempt: data.attempt ?? 1 }];
    case 'run.resumed':
      return ['timeline.resumed', { attempt: data.attempt ?? '?', chars: data.resumed_chars ?? 0 }];
    case 'run.completed': {
      const usage = data.usage ?? {};
      const finish = [data.finish_reason, data.outcome].filter((part) => typeof part === 'string' && part !== '').join(' · ');
      if (usage.prompt_tokens === undefined) return ['timeline.plain', { text: finish }];
      return ['timeline.completed', { finish, prompt: usage.prompt_tokens, completion: usage.completion_tokens ?? 0 }];
    }
    case 'run.failed':
    case 'run.degraded':
    case 'answer.unsupported':
      return ['timeline.plain', { text: text(data.reason) }];
    case 'answer.basis':
      return ['timeline.plain', { text: text(data.basis) }];
    case 'context.prepared': {
      const used = ['system', 'tools', 'memory', 'history', 'question', 'reserved_output']
        .reduce((sum, part) => sum + (typeof data[part] === 'number' ? data[part] : 0), 0);
      return ['timeline.context', {
        used, window: text(data.window), system: text(data.system), tools: text(data.tools),
        memory: text(data.memory), history: text(data.history), turns: text(data.turns_sent),
        question: text(data.question), reserved: text(data.reserved_output), observations: text(data.observation_budget),
      }];
    }
    case 'memory.compacted':
      if (typeof data.degraded === 'string' && data.degraded !== '') return ['timeline.memory_degraded', { reason: text(data.degraded) }];
      return ['timeline.memory', { covered: text(data.covered_messages), items: text(data.items) }];
    case 'route.decided': {
      const confidence = typeof data.confidence === 'number' ? ` ${Math.round(data.confidence * 100)}%` : '';
      const flags = Array.isArray(data.flags) && data.flags.length > 0 ? ` [${data.flags.map(text).join(', ')}]` : '';
      return ['timeline.route', { intent: text(data.intent), mode: text(data.mode), source: text(data.source) + confidence, flags }];
    }
    case 'tool.started':
      return ['timeline.tool_started', { name: text(data.name) }];
    case 'tool.completed':
      if (text(data.summary) === '') return ['timeline.plain', { text: `${text(data.name)}: ${text(data.status)}` }];
      return ['timeline.tool_completed', { name: text(data.name), status: text(data.status), summary: text(data.summary) }];
    case 'citation':
      return ['timeline.citation', { n: text(data.n), source: [data.kb, data.path].map(text).filter(Boolean).join(':') }];
    case 'card':
      return ['timeline.plain', { text: text(data.kind) }];
    case 'confirmation.required':
      return ['timeline.confirmation', { kind: text(data.kind), target: text(data.target) }];
    case 'clarification.needed':
      return ['timeline.plain', { text: text(data.question) }];
    case 'diagnostic.node':
      return ['timeline.diagnostic_node', { node: text(data.node), iteration: text(data.iteration), summary: text(data.summary) }];
    default:
      return null;
  }
}

/** HH:MM:SS.mmm in local time for a millisecond timestamp. */
function clock(at) {
  if (typeof at !== 'number' || !Number.isFinite(at)) return '--:--:--';
  const date = new Date(at);
  const pad = (value, width = 2) => String(value).padStart(width, '0');
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;
}

/** A string, number or boolean as text; anything else as nothing. */
function text(value) {
  return ['string', 'number', 'boolean'].includes(typeof value) ? String(value) : '';
}

/** A value safe to use in a class name or data attribute selector. */
function cssToken(value) {
  return typeof value === 'string' && /^[a-z0-9_-]{1,32}$/i.test(value) ? value : 'other';
}

function codePoints(text) {
  let count = 0;
  for (const _ of text) count += 1;
  return count;
}
