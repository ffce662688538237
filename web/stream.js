// Following one run's Server-Sent Events. It owns the EventSource: named event types, JSON
// payloads, applying each sequence number at most once (a reconnect may replay events the
// page already has), and closing the source on the terminal event so the browser does not
// reconnect to a finished run. Callers get plain {seq, type, data} objects. Replays of
// finished runs (what a reloaded page draws its cards and timelines from) queue here so that
// a long conversation never holds more than a couple of connections at once.

import { runEventsUrl } from './api.js';

export const TERMINAL_EVENTS = new Set(['run.completed', 'run.failed', 'run.cancelled']);
/** The closed set of public run event types (an EventSource only reports named types it is asked for). */
export const RUN_EVENT_TYPES = [
  'run.started', 'run.resumed', 'context.prepared', 'memory.compacted', 'route.decided', 'tool.started', 'tool.completed', 'citation', 'card',
  'confirmation.required', 'clarification.needed', 'run.degraded', 'message.delta', 'diagnostic.node', 'answer.unsupported', 'answer.basis',
  ...TERMINAL_EVENTS,
];
/** How many finished runs replay at once; browsers allow about six connections per host. */
const REPLAY_CONCURRENCY = 2;

/**
 * Opens the run's event stream after sequence number `after`.
 * - onEvent({seq, type, data}) for each new event, in order, never twice;
 * - onConnection('open' | 'reconnecting') as the browser connects and reconnects;
 * - onLost() when the stream closed without a terminal event and will not reconnect
 *   (the server answered an error such as 401 or 404).
 * Returns {close(), lastSeq()}.
 */
export function followRun(runId, { after = 0, onEvent, onConnection = () => {}, onLost = () => {} }) {
  let lastSeq = after;
  let finished = false;
  const source = new EventSource(runEventsUrl(runId, after));

  const close = () => {
    finished = true;
    source.close();
  };

  for (const type of RUN_EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      if (finished) return;
      const seq = Number.parseInt(message.lastEventId, 10);
      if (Number.isFinite(seq) && seq <= lastSeq) return; // Already applied before a reconnect.
      if (Number.isFinite(seq)) lastSeq = seq;
      if (TERMINAL_EVENTS.has(type)) close();
      onEvent({ seq: Number.isFinite(seq) ? seq : null, type, data: parseData(message.data) });
    });
  }
  source.addEventListener('open', () => {
    if (!finished) onConnection('open');
  });
  source.addEventListener('error', () => {
    if (finished) return;
    if (source.readyState === EventSource.CLOSED) {
      finished = true;
      onLost();
    } else {
      onConnection('reconnecting');
    }
  });

  return { close, lastSeq: () => lastSeq };
}

function parseData(text) {
  try {
    const data = JSON.parse(text);
    return data !== null && typeof data === 'object' ? data : {};
  } catch {
    return {};
  }
}

const replayQueue = [];
let replaysRunning = 0;

/**
 * Replays a finished run's events from the start, before the replays queued earlier (the
 * newest answers, at the bottom of a conversation, fill in first):
 * onEvent({seq, type, data}) for each, then onDone(true) after the terminal event or
 * onDone(false) when the stream could not be read. Returns {close()}, which drops the replay
 * (queued or running) without calling onDone.
 */
export function replayRun(runId, { onEvent, onDone = () => {} }) {
  const job = { runId, onEvent, onDone, stream: null, state: 'queued' };
  replayQueue.push(job);
  pumpReplays();
  return {
    close: () => {
      if (job.state === 'queued') {
        replayQueue.splice(replayQueue.indexOf(job), 1);
        job.state = 'closed';
      } else if (job.state === 'running') {
        job.stream.close();
        endReplay(job);
      }
    },
  };
}

function pumpReplays() {
  while (replaysRunning < REPLAY_CONCURRENCY && replayQueue.length > 0) {
    const job = replayQueue.pop();
    job.state = 'running';
    replaysRunning += 1;
    job.stream = followRun(job.runId, {
      after: 0,
      onEvent: (event) => {
        if (job.state !== 'running') return;
        try {
          job.onEvent(event);
        } finally {
          if (TERMINAL_EVENTS.has(event.type) && endReplay(job)) job.onDone(true);
        }
      },
      onLost: () => {
        if (endReplay(job)) job.onDone(false);
      },
    });
  }
}

/** Frees the job's slot once; true when this call ended it. */
function endReplay(job) {
  if (job.state !== 'running') return false;
  job.state = 'done';
  replaysRunning -= 1;
  queueMicrotask(pumpReplays);
  return true;
}
