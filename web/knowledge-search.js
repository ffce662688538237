// The search preview of the Knowledge screen: a query, a retrieval mode (hybrid, BM25,
// vector) and a knowledge base (or all the caller may read), and the hits as the chat agent
// would get them — fused score, the citation (knowledge base, file, heading path, location),
// the text, and each retriever's rank and score (or that it did not find the passage). A
// hit opens the passage viewer on its chunk.

import * as api from './api.js';
import { button, clearText, errorLine, field, hideError, section, select, showError, statusLine, text, textInput } from './admin-common.js';
import { h } from './dom.js';
import { bindText } from './i18n.js';
import { openPassage } from './passage.js';

const MODES = [['hybrid', 'search.mode.hybrid'], ['bm25', 'search.mode.bm25'], ['vector', 'search.mode.vector']];
const RESULT_LIMIT = 10;
/** Hit texts longer than this are cut in the list (the passage viewer shows them whole). */
const MAX_SNIPPET_CHARS = 400;

/** Creates the preview. Returns {element, setKnowledgeBases(names)}. */
export function createSearchPreview() {
  const query = textInput({ testid: 'search-query', type: 'search', required: true });
  const mode = select(MODES, { testid: 'search-mode', value: 'hybrid' });
  const kb = select([['', 'search.all_kbs']], { testid: 'search-kb' });
  const submit = button('search.submit', { testid: 'search-submit', className: 'button button-primary', type: 'submit' });
  const error = errorLine('search-error');
  const status = statusLine('search-status');
  const results = h('ol', { className: 'search-hits', testid: 'search-hits' });
  const form = h('form', { className: 'admin-form search-form', testid: 'search-form', attrs: { role: 'search' } },
    h('div', { className: 'admin-grid search-grid' },
      field('search.query', query, { className: 'search-query-field' }),
      field('search.mode', mode),
      field('search.kb', kb)),
    h('div', { className: 'admin-row' }, submit));
  let generation = 0;
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const q = query.value.trim();
    if (!q) {
      query.focus();
      return;
    }
    generation += 1;
    const mine = generation;
    hideError(error);
    bindText(status, 'search.searching');
    submit.disabled = true;
    let hits;
    try {
      hits = await api.searchKnowledge({ q, kb: kb.value, mode: mode.value, limit: RESULT_LIMIT });
    } catch (failure) {
      if (mine !== generation) return;
      clearText(status);
      showError(error, failure);
      results.replaceChildren();
      return;
    } finally {
      submit.disabled = false;
    }
    if (mine !== generation) return;
    bindText(status, hits.length === 0 ? 'search.none' : 'search.count', { count: hits.length });
    results.replaceChildren(...hits.map((hit, index) => hitItem(hit, index + 1)));
  });
  const element = section('search.title', { testid: 'kb-search' }, form, error, status, results);

  const setKnowledgeBases = (names) => {
    const current = kb.value;
    kb.replaceChildren(bindText(h('option', { value: '' }), 'search.all_kbs'), ...names.map((name) => h('option', { value: name, text: name })));
    kb.value = names.includes(current) ? current : '';
  };
  return { element, setKnowledgeBases };
}

function hitItem(hit, position) {
  const citation = hit.citation && typeof hit.citation === 'object' ? hit.citation : {};
  const headings = Array.isArray(citation.heading_path) ? citation.heading_path.map(text).filter(Boolean) : [];
  const title = text(citation.title) || text(citation.path) || text(citation.kb);
  const where = [text(citation.kb), text(citation.path), headings.join(' › '), locationText(citation.location)].filter(Boolean).join(' · ');
  const snippet = [...text(hit.text)];
  const chunkId = text(hit.chunk_id);
  const open = chunkId ? button('search.open_passage', { testid: 'search-open-passage', className: 'button button-small' }) : null;
  open?.addEventListener('click', () => openPassage(chunkId, open));
  const score = Number(hit.score);
  return h('li', { className: 'search-hit', testid: 'search-hit', data: { chunkId } },
    h('div', { className: 'search-hit-head' },
      h('span', { className: 'search-hit-rank', text: `#${position}` }),
      h('strong', { className: 'search-hit-title', testid: 'search-hit-title', text: title }),
      Number.isFinite(score) ? bindText(h('span', { className: 'chip', testid: 'search-hit-score' }), 'search.score', { score: score.toFixed(4) }) : null),
    h('p', { className: 'search-hit-where admin-muted', testid: 'search-hit-citation', text: where }),
    h('p', { className: 'search-hit-text', testid: 'search-hit-text', text: snippet.length > MAX_SNIPPET_CHARS ? `${snippet.slice(0, MAX_SNIPPET_CHARS).join('')}…` : snippet.join('') }),
    h('div', { className: 'search-hit-foot' },
      h('span', { className: 'search-ranks', testid: 'search-ranks' }, rankChip('bm25', hit.bm25), rankChip('vector', hit.vector)),
      open));
}

/** A retriever's view of a hit: its rank and score, or that it did not return it. */
function rankChip(retriever, rank) {
  const chip = h('span', { className: 'chip search-rank', testid: `search-rank-${retriever}`, data: { retriever } });
  if (rank && typeof rank === 'object' && Number.isFinite(Number(rank.rank))) {
    const score = Number(rank.score);
    bindText(chip, `search.rank.${retriever}`, { rank: text(rank.rank), score: Number.isFinite(score) ? score.toFixed(3) : '?' });
  } else {
    chip.dataset.missing = 'true';
    bindText(chip, `search.rank.${retriever}_none`);
  }
  return chip;
}

function locationText(location) {
  if (!location || typeof location !== 'object') return '';
  const prefix = { lines: 'L', pages: 'p.', paragraphs: '¶' };
  if (prefix[location.kind]) {
    const from = text(location.start);
    const to = text(location.end) || from;
    return from ? `${prefix[location.kind]}${from === to ? from : `${from}–${to}`}` : '';
  }
  for (const unit of Object.keys(prefix)) {
    if (Array.isArray(location[unit]) && location[unit].length > 0) {
      const [from, to = from] = location[unit].map(text);
      return `${prefix[unit]}${from === to ? from : `${from}–${to}`}`;
    }
  }
  return '';
}
