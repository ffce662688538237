// Markdown for chat messages: a small parser (text -> AST) and a DOM renderer (AST -> nodes).
// It owns the only place where untrusted message text becomes DOM, so it never builds HTML
// strings: every node is made with createElement and filled with textContent. Raw HTML in
// the input stays literal text, images render as their alt text, and only http(s):, mailto:
// and same-site ("/…", "#…") links get an href. The parser is pure (no DOM) so node can test
// it, and it accepts partial input because answers are re-rendered while they stream.
// Citation markers ("[1]", "[1, 2]") of passages the caller knows become citation nodes,
// rendered as buttons; markers of unknown passages, and any inside code or links, stay text.

/** Deepest nesting of block quotes and lists; deeper markers stay literal text. */
const MAX_BLOCK_DEPTH = 8;
/** Longest input parsed as markdown; longer text renders as one plain code block. */
const MAX_MARKDOWN_CHARS = 200_000;
/** How far a "[" or "`" looks ahead for its partner, which keeps parsing linear. */
const MAX_INLINE_LOOKAHEAD = 2048;
/** Code fence languages that may become a `language-…` class. */
const LANGUAGE_PATTERN = /^[A-Za-z0-9_+-]{1,20}$/;

const FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const THEMATIC_BREAK = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const BLOCKQUOTE = /^ {0,3}> ?/;
const LIST_ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:([ \t]+)(.*))?$/;
const TABLE_SEPARATOR = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const BLANK = /^[ \t]*$/;

/** A citation marker: one or more passage numbers in brackets, "[1]" or "[1, 2]". */
const CITATION_MARKER = /\[(\d{1,3}(?:[ \t]*,[ \t]*\d{1,3})*)\]/g;

/**
 * Parses markdown into a plain-object tree:
 * document{children} of blocks — paragraph{children}, heading{level, children},
 * code{language, text, closed}, list{ordered, start, items: [{children}]},
 * blockquote{children}, table{align, header, rows}, thematic_break — whose inline
 * children are text{value}, code_span{value}, strong{children}, emphasis{children},
 * link{href, external, children}, line_break and citation{n}. Citation nodes appear only
 * for the numbers in `options.citations` (a Set or Map keyed by number).
 */
export function parseMarkdown(text, { citations = null } = {}) {
  const source = String(text ?? '');
  if (source.length > MAX_MARKDOWN_CHARS) {
    return { type: 'document', children: [{ type: 'code', language: null, text: source, closed: true }] };
  }
  const lines = source.replace(/\r\n?/g, '\n').replace(/\u0000/g, '\uFFFD').split('\n');
  const children = parseBlocks(lines, 0);
  const known = citations && citations.size > 0 ? citations : null;
  return { type: 'document', children: known ? children.map((block) => citeBlock(block, known)) : children };
}

/**
 * Renders markdown into a DocumentFragment built only with createElement and text nodes.
 * `options.citations` names the passages whose markers become buttons; `citationElement(n)`
 * may build that button (by default a <button class="citation-ref" data-n>).
 */
export function renderMarkdown(text, doc = globalThis.document, { citations = null, citationElement = null } = {}) {
  const fragment = doc.createDocumentFragment();
  const context = { doc, citationElement };
  for (const block of parseMarkdown(text, { citations }).children) {
    fragment.appendChild(renderBlock(block, context));
  }
  return fragment;
}

/**
 * Returns the href to use for a link destination, or null when it must not be a link.
 * Allowed: http:, https:, mailto:, and same-site URLs starting with "/" or "#". Control
 * characters and whitespace are removed first, since browsers ignore them inside schemes.
 */
export function safeHref(destination) {
  const cleaned = String(destination ?? '').replace(/[\u0000-\u0020\u007f-\u00a0\u00ad\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u3000\ufeff]/g, '');
  if (cleaned === '') return null;
  const allowedStart = /^(?:https?:|mailto:)/i.test(cleaned) || cleaned.startsWith('/') || cleaned.startsWith('#');
  if (!allowedStart) return null;
  let parsed;
  try {
    parsed = new URL(cleaned, 'http://same-site.invalid/');
  } catch {
    return null;
  }
  if (!['http:', 'https:', 'mailto:'].includes(parsed.protocol)) return null;
  return cleaned;
}

// ---------------------------------------------------------------------------------------
// Blocks

function parseBlocks(lines, depth) {
  const blocks = [];
  let index = 0;
  while (index < lines.length) {
    const line = lines[index];
    if (BLANK.test(line)) {
      index += 1;
      continue;
    }
    const parsed = parseFence(lines, index)
      ?? parseHeading(lines, index)
      ?? parseThematicBreak(lines, index)
      ?? parseBlockquote(lines, index, depth)
      ?? parseList(lines, index, depth)
      ?? parseTable(lines, index)
      ?? parseParagraph(lines, index, depth);
    blocks.push(parsed.block);
    index = parsed.next;
  }
  return blocks;
}

function parseFence(lines, start) {
  const open = FENCE_OPEN.exec(lines[start]);
  if (!open) return null;
  const marker = open[1];
  const indent = lines[start].length - lines[start].trimStart().length;
  const closing = new RegExp(`^ {0,3}${marker[0] === '`' ? '`' : '~'}{${marker.length},}[ \\t]*$`);
  const body = [];
  let index = start + 1;
  let closed = false;
  while (index < lines.length) {
    if (closing.test(lines[index])) {
      closed = true;
      index += 1;
      break;
    }
    body.push(removeIndent(lines[index], indent));
    index += 1;
  }
  // While an answer streams, an open fence usually ends in the newline just typed.
  if (!closed && body.length > 0 && body[body.length - 1] === '') body.pop();
  const language = LANGUAGE_PATTERN.test(open[2]) ? open[2] : null;
  return { block: { type: 'code', language, text: body.join('\n'), closed }, next: index };
}

function parseHeading(lines, start) {
  const match = HEADING.exec(lines[start]);
  if (!match) return null;
  const block = { type: 'heading', level: match[1].length, children: parseInlines(match[2] ?? '') };
  return { block, next: start + 1 };
}

function parseThematicBreak(lines, start) {
  if (!THEMATIC_BREAK.test(lines[start])) return null;
  return { block: { type: 'thematic_break' }, next: start + 1 };
}

function parseBlockquote(lines, start, depth) {
  if (depth >= MAX_BLOCK_DEPTH || !BLOCKQUOTE.test(lines[start])) return null;
  const inner = [];
  let index = start;
  while (index < lines.length) {
    const line = lines[index];
    if (BLOCKQUOTE.test(line)) {
      inner.push(line.replace(BLOCKQUOTE, ''));
    } else if (!BLANK.test(line) && inner.length > 0 && !BLANK.test(inner[inner.length - 1]) && !startsBlock(lines, index)) {
      inner.push(line); // A lazy continuation of the quoted paragraph.
    } else {
      break;
    }
    index += 1;
  }
  return { block: { type: 'blockquote', children: parseBlocks(inner, depth + 1) }, next: index };
}

function parseList(lines, start, depth) {
  if (depth >= MAX_BLOCK_DEPTH) return null;
  const first = listMarker(lines[start]);
  if (!first) return null;
  const list = { type: 'list', ordered: first.ordered, start: first.start, items: [] };
  let index = start;
  while (index < lines.length) {
    const marker = listMarker(lines[index]);
    if (!marker || marker.ordered !== first.ordered || marker.delimiter !== first.delimiter) break;
    const item = [marker.content];
    index += 1;
    while (index < lines.length) {
      const line = lines[index];
      if (BLANK.test(line)) {
        const nextLine = nextNonBlank(lines, index);
        if (nextLine === -1 || indentWidth(lines[nextLine]) < marker.contentIndent) break;
        item.push('');
      } else if (indentWidth(line) >= marker.contentIndent) {
        item.push(removeIndent(line, marker.contentIndent));
      } else if (indentWidth(line) >= 2 && listMarker(line)) {
        item.push(line.trimStart()); // A nested list indented less than the content column.
      } else if (!startsBlock(lines, index) && !BLANK.test(item[item.length - 1])) {
        item.push(line); // A lazy continuation of the item's paragraph.
      } else {
        break;
      }
      index += 1;
    }
    list.items.push({ children: parseBlocks(item, depth + 1) });
    // A blank line between items keeps the list going when another item follows.
    const nextLine = nextNonBlank(lines, index);
    if (nextLine !== -1 && nextLine !== index) {
      const following = listMarker(lines[nextLine]);
      if (following && following.ordered === first.ordered && following.delimiter === first.delimiter) index = nextLine;
    }
  }
  return { block: list, next: index };
}

function parseTable(lines, start) {
  if (start + 1 >= lines.length || !lines[start].includes('|') || !TABLE_SEPARATOR.test(lines[start + 1])) return null;
  if (!lines[start + 1].includes('|') && !lines[start + 1].includes(':')) {
    if (!/^\s*\|/.test(lines[start])) return null; // "a | b" over "---" is a paragraph and a rule.
  }
  const header = splitTableRow(lines[start]);
  const align = splitTableRow(lines[start + 1]).map(tableAlignment);
  if (header.length !== align.length) return null;
  const rows = [];
  let index = start + 2;
  while (index < lines.length && !BLANK.test(lines[index]) && lines[index].includes('|') && !startsBlock(lines, index)) {
    const cells = splitTableRow(lines[index]);
    rows.push(align.map((_, column) => parseInlines(cells[column] ?? '')));
    index += 1;
  }
  const block = { type: 'table', align, header: header.map((cell) => parseInlines(cell)), rows };
  return { block, next: index };
}

function parseParagraph(lines, start, depth) {
  const text = [lines[start].trim()];
  let index = start + 1;
  while (index < lines.length && !BLANK.test(lines[index]) && !startsBlock(lines, index, depth)) {
    text.push(lines[index].trim());
    index += 1;
  }
  return { block: { type: 'paragraph', children: parseInlines(text.join('\n')) }, next: index };
}

/** True when the line would start a block other than a paragraph. */
function startsBlock(lines, index) {
  const line = lines[index];
  return FENCE_OPEN.test(line)
    || HEADING.test(line)
    || THEMATIC_BREAK.test(line)
    || BLOCKQUOTE.test(line)
    || listMarker(line) !== null
    || (index + 1 < lines.length && line.includes('|') && TABLE_SEPARATOR.test(lines[index + 1]) && lines[index + 1].includes('|'));
}

function listMarker(line) {
  const match = LIST_ITEM.exec(line);
  if (!match) return null;
  const ordered = /\d/.test(match[2]);
  const spacing = match[3] ?? ' ';
  const padding = spacing.length > 4 ? 1 : Math.max(1, spacing.replace(/\t/g, '    ').length);
  return {
    ordered,
    start: ordered ? Number.parseInt(match[2], 10) : 1,
    delimiter: ordered ? match[2].slice(-1) : match[2],
    content: spacing.length > 4 ? spacing.slice(1) + (match[4] ?? '') : (match[4] ?? ''),
    contentIndent: match[1].length + match[2].length + padding,
  };
}

function splitTableRow(line) {
  let row = line.trim();
  if (row.startsWith('|')) row = row.slice(1);
  if (row.endsWith('|') && !row.endsWith('\\|')) row = row.slice(0, -1);
  const cells = [];
  let current = '';
  let inCode = false;
  for (let i = 0; i < row.length; i += 1) {
    const char = row[i];
    if (char === '\\' && row[i + 1] === '|') {
      current += '|';
      i += 1;
    } else if (char === '`') {
      inCode = !inCode;
      current += char;
    } else if (char === '|' && !inCode) {
      cells.push(current.trim());
      current = '';
    } else {
      current += char;
    }
  }
  cells.push(current.trim());
  return cells;
}

function tableAlignment(cell) {
  const left = cell.startsWith(':');
  const right = cell.endsWith(':');
  if (left && right) return 'center';
  if (right) return 'right';
  if (left) return 'left';
  return null;
}

function indentWidth(line) {
  let width = 0;
  for (const char of line) {
    if (char === ' ') width += 1;
    else if (char === '\t') width += 4 - (width % 4);
    else break;
  }
  return width;
}

function removeIndent(line, count) {
  let removed = 0;
  let index = 0;
  while (index < line.length && removed < count) {
    if (line[index] === ' ') removed += 1;
    else if (line[index] === '\t') removed += 4 - (removed % 4);
    else break;
    index += 1;
  }
  return line.slice(index);
}

function nextNonBlank(lines, index) {
  for (let i = index; i < lines.length; i += 1) {
    if (!BLANK.test(lines[i])) return i;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// Inlines

const ASCII_PUNCTUATION = /[!-/:-@[-`{-~]/;
const AUTOLINK_BRACKETED = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i;
const BARE_URL = /^https?:\/\/[^\s<>"]+/i;

/** Parses one block's inline text into inline nodes. */
export function parseInlines(text, options = { links: true }) {
  const nodes = [];
  let buffer = '';
  const flush = () => {
    if (buffer) nodes.push({ type: 'text', value: buffer });
    buffer = '';
  };
  let i = 0;
  while (i < text.length) {
    const char = text[i];
    if (char === '\\' && i + 1 < text.length && ASCII_PUNCTUATION.test(text[i + 1])) {
      buffer += text[i + 1];
      i += 2;
    } else if (char === '\\' && text[i + 1] === '\n') {
      flush();
      nodes.push({ type: 'line_break' });
      i += 2;
    } else if (char === '\n') {
      buffer = buffer.replace(/[ \t]+$/, '');
      flush();
      nodes.push({ type: 'line_break' });
      i += 1;
    } else if (char === '`') {
      const span = parseCodeSpan(text, i);
      if (span) {
        flush();
        nodes.push(span.node);
      } else {
        buffer += text.slice(i, i + runLength(text, i, '`'));
      }
      i = span ? span.next : i + runLength(text, i, '`');
    } else if (char === '!' && text[i + 1] === '[') {
      const image = parseBracketed(text, i + 1);
      if (image) {
        buffer += image.label; // Images are never loaded: show the alt text as plain text.
        i = image.next;
      } else {
        buffer += char;
        i += 1;
      }
    } else if (char === '[' && options.links) {
      const link = parseBracketed(text, i);
      if (link) {
        flush();
        nodes.push(...linkNodes(link.label, link.destination));
        i = link.next;
      } else {
        buffer += char;
        i += 1;
      }
    } else if (char === '<' && options.links && AUTOLINK_BRACKETED.test(text.slice(i, i + 2048))) {
      const match = AUTOLINK_BRACKETED.exec(text.slice(i, i + 2048));
      flush();
      nodes.push(...linkNodes(null, match[1]));
      i += match[0].length;
    } else if ((char === 'h' || char === 'H') && options.links && !isWordChar(text[i - 1]) && BARE_URL.test(text.slice(i, i + 2048))) {
      const url = trimUrl(BARE_URL.exec(text.slice(i, i + 2048))[0]);
      flush();
      nodes.push(...linkNodes(null, url));
      i += url.length;
    } else if (char === '*' || char === '_') {
      flush();
      const length = runLength(text, i, char);
      nodes.push(delimiter(text, i, length, char));
      i += length;
    } else {
      buffer += char;
      i += 1;
    }
  }
  flush();
  return resolveEmphasis(nodes);
}

function linkNodes(label, destination) {
  const href = safeHref(destination);
  const children = label === null ? [{ type: 'text', value: destination }] : parseInlines(label, { links: false });
  if (href === null) return children; // Unsafe or unsupported: the label as plain text.
  return [{ type: 'link', href, external: /^(?:https?:|\/\/|\/\\)/i.test(href), children }];
}

/** Parses `[label](destination "title")` starting at the "[". */
function parseBracketed(text, start) {
  const limit = Math.min(text.length, start + MAX_INLINE_LOOKAHEAD);
  let depth = 0;
  let close = -1;
  for (let i = start; i < limit; i += 1) {
    if (text[i] === '\\') {
      i += 1;
    } else if (text[i] === '[') {
      depth += 1;
    } else if (text[i] === ']') {
      depth -= 1;
      if (depth === 0) {
        close = i;
        break;
      }
    }
  }
  if (close === -1 || text[close + 1] !== '(') return null;
  let parens = 0;
  let end = -1;
  for (let i = close + 1; i < Math.min(text.length, close + MAX_INLINE_LOOKAHEAD); i += 1) {
    if (text[i] === '\\') {
      i += 1;
    } else if (text[i] === '(') {
      parens += 1;
    } else if (text[i] === ')') {
      parens -= 1;
      if (parens === 0) {
        end = i;
        break;
      }
    }
  }
  if (end === -1) return null;
  let destination = text.slice(close + 2, end).trim();
  const titled = /^(\S+)\s+(?:"[^"]*"|'[^']*'|\([^)]*\))$/.exec(destination);
  if (titled) destination = titled[1];
  if (destination.startsWith('<') && destination.endsWith('>')) destination = destination.slice(1, -1);
  return { label: text.slice(start + 1, close), destination, next: end + 1 };
}

function parseCodeSpan(text, start) {
  const length = runLength(text, start, '`');
  let search = start + length;
  while (search < text.length) {
    const found = text.indexOf('`', search);
    if (found === -1 || found - start > MAX_INLINE_LOOKAHEAD) return null;
    const closing = runLength(text, found, '`');
    if (closing === length) {
      let value = text.slice(start + length, found).replace(/\n/g, ' ');
      if (/^ .*[^ ].* $/.test(value)) value = value.slice(1, -1);
      return { node: { type: 'code_span', value }, next: found + closing };
    }
    search = found + closing;
  }
  return null;
}

function trimUrl(url) {
  let trimmed = url.replace(/[.,:;!?'"*_~]+$/, '');
  while (trimmed.endsWith(')') && count(trimmed, '(') < count(trimmed, ')')) {
    trimmed = trimmed.slice(0, -1).replace(/[.,:;!?'"*_~]+$/, '');
  }
  return trimmed;
}

function delimiter(text, index, length, char) {
  const before = index === 0 ? ' ' : text[index - 1];
  const after = index + length >= text.length ? ' ' : text[index + length];
  const beforeSpace = /\s/.test(before);
  const afterSpace = /\s/.test(after);
  const beforePunct = isPunctuation(before);
  const afterPunct = isPunctuation(after);
  const leftFlanking = !afterSpace && (!afterPunct || beforeSpace || beforePunct);
  const rightFlanking = !beforeSpace && (!beforePunct || afterSpace || afterPunct);
  const canOpen = char === '*' ? leftFlanking : leftFlanking && (!rightFlanking || beforePunct);
  const canClose = char === '*' ? rightFlanking : rightFlanking && (!leftFlanking || afterPunct);
  return { type: 'delimiter', char, count: length, original: length, canOpen, canClose };
}

/**
 * Pairs `*`/`_` delimiter runs into emphasis and strong nodes (CommonMark's algorithm,
 * simplified). `searchFloor` remembers, per kind of closer, where a failed search for an
 * opener stopped, so that the pass stays linear on long runs of unmatched delimiters.
 */
function resolveEmphasis(nodes) {
  const searchFloor = new Map();
  let i = 0;
  while (i < nodes.length) {
    const closer = nodes[i];
    if (closer.type !== 'delimiter' || !closer.canClose || closer.count === 0) {
      i += 1;
      continue;
    }
    const kind = `${closer.char}${closer.original % 3}${closer.canOpen ? 1 : 0}`;
    const floor = searchFloor.get(kind) ?? -1;
    let openerIndex = -1;
    for (let j = i - 1; j > floor; j -= 1) {
      const candidate = nodes[j];
      if (candidate.type !== 'delimiter' || candidate.char !== closer.char || !candidate.canOpen || candidate.count === 0) continue;
      const oddMatch = (candidate.canClose || closer.canOpen)
        && (candidate.original + closer.original) % 3 === 0
        && !(candidate.original % 3 === 0 && closer.original % 3 === 0);
      if (oddMatch) continue;
      openerIndex = j;
      break;
    }
    if (openerIndex === -1) {
      searchFloor.set(kind, i - 1);
      i += 1;
      continue;
    }
    const opener = nodes[openerIndex];
    const used = opener.count >= 2 && closer.count >= 2 ? 2 : 1;
    opener.count -= used;
    closer.count -= used;
    const inner = finishInlines(nodes.slice(openerIndex + 1, i));
    nodes.splice(openerIndex + 1, i - openerIndex - 1, { type: used === 2 ? 'strong' : 'emphasis', children: inner });
    for (const [key, value] of searchFloor) {
      if (value > openerIndex) searchFloor.set(key, openerIndex);
    }
    i = openerIndex + 2;
  }
  return finishInlines(nodes);
}

/** Turns unmatched delimiters back into text and merges neighbouring text nodes. */
function finishInlines(nodes) {
  const result = [];
  for (const node of nodes) {
    const current = node.type === 'delimiter' ? { type: 'text', value: node.char.repeat(node.count) } : node;
    if (current.type === 'text') {
      if (current.value === '') continue;
      const last = result[result.length - 1];
      if (last && last.type === 'text') {
        result[result.length - 1] = { type: 'text', value: last.value + current.value };
        continue;
      }
    }
    result.push(current);
  }
  return result;
}

function runLength(text, start, char) {
  let end = start;
  while (text[end] === char) end += 1;
  return end - start;
}

function count(text, char) {
  return text.split(char).length - 1;
}

function isPunctuation(char) {
  return /[\p{P}\p{S}]/u.test(char);
}

function isWordChar(char) {
  return char !== undefined && /[\p{L}\p{N}_]/u.test(char);
}

// ---------------------------------------------------------------------------------------
// Citations

function citeBlock(block, known) {
  switch (block.type) {
    case 'paragraph':
    case 'heading':
      return { ...block, children: citeInlines(block.children, known) };
    case 'blockquote':
      return { ...block, children: block.children.map((child) => citeBlock(child, known)) };
    case 'list':
      return { ...block, items: block.items.map((item) => ({ ...item, children: item.children.map((child) => citeBlock(child, known)) })) };
    case 'table':
      return {
        ...block,
        header: block.header.map((cell) => citeInlines(cell, known)),
        rows: block.rows.map((row) => row.map((cell) => citeInlines(cell, known))),
      };
    default:
      return block; // Code blocks and rules keep their text as it is.
  }
}

function citeInlines(inlines, known) {
  const result = [];
  for (const inline of inlines) {
    if (inline.type === 'text') result.push(...splitCitations(inline.value, known));
    else if (inline.type === 'strong' || inline.type === 'emphasis') result.push({ ...inline, children: citeInlines(inline.children, known) });
    else result.push(inline); // Links, code spans and line breaks stay as they are.
  }
  return result;
}

/** Splits text at the markers whose every number is a known passage. */
export function splitCitations(value, known) {
  const parts = [];
  let last = 0;
  for (const match of value.matchAll(CITATION_MARKER)) {
    const numbers = match[1].split(',').map((part) => Number.parseInt(part.trim(), 10));
    if (!numbers.every((n) => known.has(n))) continue;
    if (match.index > last) parts.push({ type: 'text', value: value.slice(last, match.index) });
    for (const n of numbers) parts.push({ type: 'citation', n });
    last = match.index + match[0].length;
  }
  if (last === 0) return [{ type: 'text', value }];
  if (last < value.length) parts.push({ type: 'text', value: value.slice(last) });
  return parts;
}

// ---------------------------------------------------------------------------------------
// Rendering

function renderBlock(block, context) {
  const { doc } = context;
  switch (block.type) {
    case 'paragraph':
      return withInlines(doc.createElement('p'), block.children, context);
    case 'heading':
      return withInlines(doc.createElement(`h${block.level}`), block.children, context);
    case 'code':
      return renderCodeBlock(block, context);
    case 'list':
      return renderList(block, context);
    case 'blockquote': {
      const quote = doc.createElement('blockquote');
      for (const child of block.children) quote.appendChild(renderBlock(child, context));
      return quote;
    }
    case 'table':
      return renderTable(block, context);
    case 'thematic_break':
      return doc.createElement('hr');
    default:
      return doc.createTextNode('');
  }
}

function renderCodeBlock(block, { doc }) {
  const pre = doc.createElement('pre');
  const code = doc.createElement('code');
  if (block.language) {
    code.className = `language-${block.language}`;
    pre.dataset.language = block.language;
  }
  if (!block.closed) pre.classList.add('code-open');
  code.textContent = block.text;
  pre.appendChild(code);
  return pre;
}

function renderList(block, context) {
  const { doc } = context;
  const list = doc.createElement(block.ordered ? 'ol' : 'ul');
  if (block.ordered && block.start !== 1) list.setAttribute('start', String(block.start));
  for (const item of block.items) {
    const li = doc.createElement('li');
    const tight = item.children.length > 0 && item.children.every((child) => child.type !== 'paragraph' || item.children.indexOf(child) === 0);
    for (const child of item.children) {
      if (tight && child.type === 'paragraph') withInlines(li, child.children, context);
      else li.appendChild(renderBlock(child, context));
    }
    list.appendChild(li);
  }
  return list;
}

function renderTable(block, context) {
  const { doc } = context;
  const wrapper = doc.createElement('div');
  wrapper.className = 'table-scroll';
  const table = doc.createElement('table');
  const head = doc.createElement('thead');
  head.appendChild(renderRow(block.header, block.align, 'th', context));
  table.appendChild(head);
  if (block.rows.length > 0) {
    const body = doc.createElement('tbody');
    for (const row of block.rows) body.appendChild(renderRow(row, block.align, 'td', context));
    table.appendChild(body);
  }
  wrapper.appendChild(table);
  return wrapper;
}

function renderRow(cells, align, tag, context) {
  const { doc } = context;
  const row = doc.createElement('tr');
  cells.forEach((cell, column) => {
    const element = withInlines(doc.createElement(tag), cell, context);
    if (align[column]) element.className = `align-${align[column]}`;
    row.appendChild(element);
  });
  return row;
}

function withInlines(parent, inlines, context) {
  for (const inline of inlines) parent.appendChild(renderInline(inline, context));
  return parent;
}

function renderInline(inline, context) {
  const { doc } = context;
  switch (inline.type) {
    case 'text':
      return doc.createTextNode(inline.value);
    case 'code_span': {
      const code = doc.createElement('code');
      code.textContent = inline.value;
      return code;
    }
    case 'strong':
      return withInlines(doc.createElement('strong'), inline.children, context);
    case 'emphasis':
      return withInlines(doc.createElement('em'), inline.children, context);
    case 'line_break':
      return doc.createElement('br');
    case 'link':
      return renderLink(inline, context);
    case 'citation':
      return renderCitation(inline.n, context);
    default:
      return doc.createTextNode('');
  }
}

function renderLink(inline, context) {
  const { doc } = context;
  // Checked again here so that a hand-made AST cannot smuggle in an unsafe href.
  const href = safeHref(inline.href);
  if (href === null) return withInlines(doc.createElement('span'), inline.children, context);
  const anchor = withInlines(doc.createElement('a'), inline.children, context);
  anchor.setAttribute('href', href);
  if (inline.external) {
    anchor.setAttribute('target', '_blank');
    anchor.setAttribute('rel', 'noopener noreferrer');
  }
  return anchor;
}

function renderCitation(n, { doc, citationElement }) {
  if (citationElement) return citationElement(n);
  const button = doc.createElement('button');
  button.setAttribute('type', 'button');
  button.className = 'citation-ref';
  button.dataset.n = String(n);
  button.textContent = String(n);
  return button;
}
