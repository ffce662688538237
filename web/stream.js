// Following one run's Server-Sent Events. It owns the EventSource: named event types, JSON
// payloads, applying each sequence number at most once (a reconnect may replay events the
// page already has), and closing the source on the terminal event so the browser does not
// reconnect to a finished run. Callers get plain {seq, type, data} objects.

import { runEventsUrl } from './api.js';

export const TERMINAL_EVENTS = new Set(['run.completed', 'run.failed', 'run.cancelled']);
export const RUN_EVENT_TYPES = ['run.started', 'run.resumed', 'message.delta', ...TERMINAL_EVENTS];

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
