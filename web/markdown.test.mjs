// Unit tests of web/markdown.js, run with `node --test web/markdown.test.mjs`. The parser is
// checked on its AST; the renderer is checked against a minimal fake document (no jsdom), so
// the tests need nothing beyond node itself.
import test from 'node:test';
import assert from 'node:assert/strict';
import { parseMarkdown, renderMarkdown, safeHref, splitCitations } from './markdown.js';

/** Collects every node of the AST (blocks, list items, table cells and inlines). */
function walk(node, visit) {
  if (Array.isArray(node)) {
    for (const child of node) walk(child, visit);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  if (node.type) visit(node);
  for (const key of ['children', 'items', 'header', 'rows']) {
    if (node[key]) walk(node[key], visit);
  }
}

function nodesOf(text, type) {
  const found = [];
  walk(parseMarkdown(text), (node) => {
    if (node.type === type) found.push(node);
  });
  return found;
}

/** The text a reader would see, in document order. */
function plainText(text) {
  const parts = [];
  walk(parseMarkdown(text), (node) => {
    if (node.type === 'text' || node.type === 'code_span') parts.push(node.value);
    if (node.type === 'code') parts.push(node.text);
  });
  return parts.join('');
}

function blocks(text) {
  return parseMarkdown(text).children;
}

// --- XSS vectors --------------------------------------------------------------------------

const UNSAFE_DESTINATIONS = [
  'javascript:alert(1)',
  ' JaVaScRiPt:alert(1)',
  'java\tscript:alert(1)',
  'java\nscript:alert(1)',
  'javascript&colon;alert(1)',
  '&#106;avascript:alert(1)',
  '&#x6A;avascript:alert(1)',
  '\u0001javascript:alert(1)',
  'jav\u00adascript:alert(1)',
  'vbscript:msgbox(1)',
  'VBScript:msgbox(1)',
  'data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==',
  'DATA:text/html,<script>alert(1)</script>',
  'file:///etc/passwd',
  'ftp://example.com/x',
  'relative/path.html',
  '?query=1',
  '',
];

for (const destination of UNSAFE_DESTINATIONS) {
  test(`link to ${JSON.stringify(destination)} renders as its label only`, () => {
    const markdown = `[click me](${destination})`;
    assert.deepEqual(nodesOf(markdown, 'link'), []);
    assert.ok(plainText(markdown).includes('click me'));
    assert.equal(safeHref(destination), null);
  });
}

test('obfuscated javascript: variants are refused by safeHref', () => {
  for (const href of ['JAVASCRIPT:x', ' javascript:x', 'javascript :x', 'java\u200bscript:x', '\u3000javascript:x', 'jav&#x09;ascript:x']) {
    assert.equal(safeHref(href), null, href);
  }
});

test('safe destinations keep their href', () => {
  assert.equal(safeHref('https://example.com/a?b=c#d'), 'https://example.com/a?b=c#d');
  assert.equal(safeHref('HTTP://example.com'), 'HTTP://example.com');
  assert.equal(safeHref('mailto:ops@example.com'), 'mailto:ops@example.com');
  assert.equal(safeHref('/docs/runbook'), '/docs/runbook');
  assert.equal(safeHref('#section-2'), '#section-2');
});

test('http links open in a new tab, same-site links do not', () => {
  const [external] = nodesOf('[docs](https://example.com)', 'link');
  assert.equal(external.href, 'https://example.com');
  assert.equal(external.external, true);
  const [local] = nodesOf('[top](#top)', 'link');
  assert.equal(local.external, false);
  const [mail] = nodesOf('[mail](mailto:a@b.c)', 'link');
  assert.equal(mail.external, false);
});

test('raw HTML stays literal text', () => {
  const markdown = 'before <img src=x onerror=alert(1)> <script>alert(2)</script> after';
  assert.equal(plainText(markdown), markdown);
  assert.deepEqual(nodesOf(markdown, 'link'), []);
});

test('raw HTML block and iframe stay literal', () => {
  const markdown = '<div onclick="x()">\n<iframe src="javascript:alert(1)"></iframe>\n</div>';
  assert.equal(plainText(markdown), markdown.replace(/\n/g, ''));
});

test('images become their alt text and never a link or image', () => {
  assert.equal(plainText('see ![a diagram](https://example.com/x.png) here'), 'see a diagram here');
  assert.deepEqual(nodesOf('![x](javascript:alert(1))', 'link'), []);
  assert.deepEqual(nodesOf('![x](https://e.com/i.png)', 'link'), []);
});

test('a link label cannot nest another link', () => {
  const links = nodesOf('[a [b](https://b.example) c](https://a.example)', 'link');
  assert.equal(links.length, 1);
  assert.equal(links[0].href, 'https://a.example');
});

test('angle-bracket autolinks only accept http(s) and mailto', () => {
  assert.equal(nodesOf('<https://example.com/x>', 'link')[0].href, 'https://example.com/x');
  assert.deepEqual(nodesOf('<javascript:alert(1)>', 'link'), []);
  assert.equal(plainText('<javascript:alert(1)>'), '<javascript:alert(1)>');
});

test('bare URLs become links without trailing punctuation', () => {
  const [link] = nodesOf('Read https://example.com/a_(b). Then', 'link');
  assert.equal(link.href, 'https://example.com/a_(b)');
  const [second] = nodesOf('(see https://example.com/x)', 'link');
  assert.equal(second.href, 'https://example.com/x');
  assert.deepEqual(nodesOf('xhttps://example.com', 'link'), []);
});

// --- Blocks --------------------------------------------------------------------------------

test('headings of all levels', () => {
  const parsed = blocks('# One\n###### Six ##\n####### seven');
  assert.equal(parsed[0].type, 'heading');
  assert.equal(parsed[0].level, 1);
  assert.equal(parsed[1].level, 6);
  assert.deepEqual(parsed[1].children, [{ type: 'text', value: 'Six' }]);
  assert.equal(parsed[2].type, 'paragraph');
});

test('paragraphs split on blank lines and keep line breaks', () => {
  const parsed = blocks('one\ntwo\n\nthree');
  assert.equal(parsed.length, 2);
  assert.deepEqual(parsed[0].children.map((node) => node.type), ['text', 'line_break', 'text']);
});

test('fenced code keeps its text verbatim and a safe language class', () => {
  const [code] = blocks('```bash\necho "**not bold**" <b>\n```');
  assert.deepEqual(code, { type: 'code', language: 'bash', text: 'echo "**not bold**" <b>', closed: true });
  assert.equal(blocks('```c++\nx\n```')[0].language, 'c++');
  assert.equal(blocks('```"><img\nx\n```')[0].language, null);
  assert.equal(blocks('```averyveryverylonglanguagename\nx\n```')[0].language, null);
  assert.equal(blocks('~~~\nx\n~~~')[0].text, 'x');
});

test('a longer closing fence closes, a shorter one does not', () => {
  assert.equal(blocks('````\n```\n````')[0].text, '```');
  assert.equal(blocks('```\ncode\n`````\nafter')[1].type, 'paragraph');
});

test('unordered and ordered lists with one level of nesting', () => {
  const [list, ordered] = blocks('- a\n- b\n  - b1\n  - b2\n- c\n\n3. three\n4. four');
  assert.equal(list.type, 'list');
  assert.equal(list.ordered, false);
  assert.equal(list.items.length, 3);
  const nested = list.items[1].children[1];
  assert.equal(nested.type, 'list');
  assert.equal(nested.items.length, 2);
  assert.equal(ordered.ordered, true);
  assert.equal(ordered.start, 3);
  assert.equal(ordered.items.length, 2);
});

test('ordered list with nested bullets under numbered items', () => {
  const [list] = blocks('1. First\n   - detail\n2. Second');
  assert.equal(list.items.length, 2);
  assert.equal(list.items[0].children[1].type, 'list');
});

test('list items separated by blank lines stay one list', () => {
  const parsed = blocks('1. one\n\n2. two\n\n3. three');
  assert.equal(parsed.length, 1);
  assert.equal(parsed[0].items.length, 3);
});

test('blockquotes nest blocks', () => {
  const [quote] = blocks('> # Title\n> - item\n> text');
  assert.equal(quote.type, 'blockquote');
  assert.deepEqual(quote.children.map((node) => node.type), ['heading', 'list']);
});

test('deep nesting is capped instead of recursing without bound', () => {
  const parsed = parseMarkdown('>'.repeat(5000) + ' deep');
  let depth = 0;
  let node = parsed.children[0];
  while (node && node.type === 'blockquote') {
    depth += 1;
    node = node.children[0];
  }
  assert.ok(depth <= 8);
});

test('GFM tables with alignment, escaped pipes and ragged rows', () => {
  const [table] = blocks('| Disk | Use % | Mount |\n|:-----|------:|:-----:|\n| sda1 | 97 | `/var\\|x` |\n| sdb1 |\n');
  assert.equal(table.type, 'table');
  assert.deepEqual(table.align, ['left', 'right', 'center']);
  assert.equal(table.header.length, 3);
  assert.equal(table.rows.length, 2);
  assert.deepEqual(table.rows[0][2], [{ type: 'code_span', value: '/var|x' }]);
  assert.deepEqual(table.rows[1][1], []);
});

test('a table needs a separator with the same number of cells', () => {
  assert.equal(blocks('| a | b |\n|---|\n| 1 | 2 |')[0].type, 'paragraph');
  assert.equal(blocks('a | b\n--|--\n1 | 2')[0].type, 'table');
});

test('horizontal rules', () => {
  assert.deepEqual(blocks('---\n* * *\n___').map((node) => node.type), ['thematic_break', 'thematic_break', 'thematic_break']);
});

// --- Inlines -------------------------------------------------------------------------------

test('bold, italic and code spans', () => {
  const [paragraph] = blocks('**bold** *it* _it_ `a*b*c` ***both***');
  const types = paragraph.children.map((node) => node.type);
  assert.deepEqual(types, ['strong', 'text', 'emphasis', 'text', 'emphasis', 'text', 'code_span', 'text', 'emphasis']);
  assert.equal(paragraph.children[6].value, 'a*b*c');
});

test('underscores inside words are not emphasis', () => {
  assert.deepEqual(nodesOf('snake_case_name and __init__.py', 'emphasis'), []);
  assert.equal(plainText('snake_case_name'), 'snake_case_name');
});

test('backslash escapes', () => {
  assert.equal(plainText('\\*not em\\* \\[not link\\](x)'), '*not em* [not link](x)');
});

// --- Partial input while streaming --------------------------------------------------------

test('an unclosed fence is an open code block', () => {
  const [intro, code] = blocks('Run this:\n\n```sh\ndf -h\ndu -sh /var/*\n');
  assert.equal(intro.type, 'paragraph');
  assert.deepEqual(code, { type: 'code', language: 'sh', text: 'df -h\ndu -sh /var/*', closed: false });
});

test('half-written emphasis and links show as text', () => {
  assert.equal(plainText('this is **bol'), 'this is **bol');
  assert.equal(plainText('see [the docs](https://exa'), 'see [the docs](https://exa');
  assert.deepEqual(nodesOf('see [the docs](javascript:al', 'link'), []);
  assert.equal(plainText('use `df -'), 'use `df -');
});

test('a table header alone is a paragraph until its separator arrives', () => {
  assert.equal(blocks('| a | b |')[0].type, 'paragraph');
  assert.equal(blocks('| a | b |\n|---|---|')[0].type, 'table');
});

test('every prefix of a rich answer parses', () => {
  const answer = '# Disk full\n\n1. Run `df -h`\n   - check **/var**\n2. See [guide](https://e.com)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```sh\ndu -sh *\n```\n> done';
  for (let length = 0; length <= answer.length; length += 1) {
    assert.doesNotThrow(() => parseMarkdown(answer.slice(0, length)));
  }
});

test('pathological input stays fast', () => {
  const started = Date.now();
  parseMarkdown('['.repeat(20000) + '*_'.repeat(20000) + '`'.repeat(5000));
  assert.ok(Date.now() - started < 2000);
});

// --- Rendering with a fake document -------------------------------------------------------

/** Just enough of the DOM for renderMarkdown, recording what it is asked to build. */
class FakeNode {
  constructor(tagName, text = null) {
    this.tagName = tagName;
    this.text = text;
    this.children = [];
    this.attributes = {};
    this.dataset = {};
    this.className = '';
    const classes = new Set();
    this.classList = { add: (name) => classes.add(name), contains: (name) => classes.has(name) };
  }

  appendChild(child) {
    this.children.push(child);
    return child;
  }

  setAttribute(name, value) {
    this.attributes[name] = String(value);
  }

  set textContent(value) {
    this.children = [new FakeNode('#text', String(value))];
  }

  get textContent() {
    return this.text ?? this.children.map((child) => child.textContent).join('');
  }

  *all() {
    yield this;
    for (const child of this.children) yield* child.all();
  }
}

const fakeDocument = {
  createElement: (tag) => new FakeNode(tag.toUpperCase()),
  createTextNode: (text) => new FakeNode('#text', text),
  createDocumentFragment: () => new FakeNode('#fragment'),
};

test('rendering builds only safe elements', () => {
  const markdown = '<img src=x onerror="window.__xss=1">\n\n[click me](javascript:window.__xss=2) [x]( JaVaScRiPt:window.__xss=3) [ok](https://example.com)\n\n![alt](https://e.com/i.png)';
  const fragment = renderMarkdown(markdown, fakeDocument);
  const tags = [...fragment.all()].map((node) => node.tagName);
  assert.ok(!tags.includes('IMG'));
  assert.ok(!tags.includes('SCRIPT'));
  const anchors = [...fragment.all()].filter((node) => node.tagName === 'A');
  assert.equal(anchors.length, 1);
  assert.equal(anchors[0].attributes.href, 'https://example.com');
  assert.equal(anchors[0].attributes.rel, 'noopener noreferrer');
  assert.equal(anchors[0].attributes.target, '_blank');
  assert.ok(fragment.textContent.includes('<img src=x onerror="window.__xss=1">'));
  assert.ok(fragment.textContent.includes('click me'));
});

test('rendering a code block sets the language class and keeps text', () => {
  const fragment = renderMarkdown('```python\nprint("<b>")\n```', fakeDocument);
  const code = [...fragment.all()].find((node) => node.tagName === 'CODE');
  assert.equal(code.className, 'language-python');
  assert.equal(code.textContent, 'print("<b>")');
});

test('rendering refuses an unsafe href even in a hand-made AST path', () => {
  // renderMarkdown re-checks hrefs; a javascript: destination never reaches setAttribute.
  const fragment = renderMarkdown('[a](javascript:alert(1)) <a href="javascript:alert(1)">b</a>', fakeDocument);
  const anchors = [...fragment.all()].filter((node) => node.tagName === 'A');
  assert.equal(anchors.length, 0);
});

test('rendering a table marks alignment with classes', () => {
  const fragment = renderMarkdown('| a | b |\n|:-:|--:|\n| 1 | 2 |', fakeDocument);
  const cells = [...fragment.all()].filter((node) => node.tagName === 'TH');
  assert.deepEqual(cells.map((cell) => cell.className), ['align-center', 'align-right']);
});

// --- Citation markers ---------------------------------------------------------------------

function citationsOf(text, known) {
  const found = [];
  walk(parseMarkdown(text, { citations: new Set(known) }), (node) => {
    if (node.type === 'citation') found.push(node.n);
  });
  return found;
}

test('markers of known passages become citation nodes', () => {
  assert.deepEqual(citationsOf('Check `df -h` [1]. Then vacuum the journal [2][1].', [1, 2]), [1, 2, 1]);
  assert.deepEqual(citationsOf('Both say so [1, 2] and [2,1].', [1, 2]), [1, 2, 2, 1]);
  assert.deepEqual(citationsOf('# Title [1]\n\n- item **bold [2]**\n\n> quoted [1]\n\n| a |\n|---|\n| cell [2] |', [1, 2]), [1, 2, 1, 2]);
});

test('unknown numbers, code and links keep their markers as text', () => {
  assert.deepEqual(citationsOf('Only [3] and [1, 3] here.', [1, 2]), []);
  assert.deepEqual(citationsOf('`array[1]` and\n\n```\nx[1]\n```\n\n[see [1]](https://e.com)', [1]), []);
  assert.deepEqual(citationsOf('No passages [1].', []), []);
  assert.equal(plainText('No passages [1].'), 'No passages [1].');
  assert.deepEqual(citationsOf('[1](https://e.com) is a link', [1]), []);
});

test('splitting keeps the text around markers', () => {
  assert.deepEqual(splitCitations('a [1] b [9] c [2]', new Set([1, 2])), [
    { type: 'text', value: 'a ' },
    { type: 'citation', n: 1 },
    { type: 'text', value: ' b [9] c ' },
    { type: 'citation', n: 2 },
  ]);
  assert.deepEqual(splitCitations('plain', new Set([1])), [{ type: 'text', value: 'plain' }]);
});

test('rendering turns citations into buttons with only a number as text', () => {
  const fragment = renderMarkdown('Fill the disk [1].', fakeDocument, { citations: new Set([1]) });
  const buttons = [...fragment.all()].filter((node) => node.tagName === 'BUTTON');
  assert.equal(buttons.length, 1);
  assert.equal(buttons[0].attributes.type, 'button');
  assert.equal(buttons[0].dataset.n, '1');
  assert.equal(buttons[0].textContent, '1');
  const custom = renderMarkdown('x [1]', fakeDocument, { citations: new Set([1]), citationElement: (n) => fakeDocument.createTextNode(`<${n}>`) });
  assert.equal(custom.textContent, 'x <1>');
});
