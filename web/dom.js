// A tiny element builder. It owns how the app creates DOM: elements, text nodes, attributes,
// data-* hooks and listeners. It has no way to parse HTML, on purpose: the page's text comes
// from users and a model, and it only ever reaches the DOM as text nodes.

let nextId = 0;

/**
 * Creates an element. `props` may hold: className, text, testid, data (data-* values),
 * attrs (plain attributes), on (event listeners), hidden, disabled, type, id.
 * Children are nodes or strings (strings become text nodes); null and false are skipped.
 */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    applyProp(element, key, value);
  }
  append(element, children);
  return element;
}

/** Appends nodes and strings (as text) to a parent, skipping null and false. */
export function append(parent, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return parent;
}

/** A page-unique id for label/aria wiring (crypto.randomUUID needs a secure context). */
export function uniqueId(prefix) {
  nextId += 1;
  return `${prefix}-${nextId}`;
}

function applyProp(element, key, value) {
  switch (key) {
    case 'className':
      element.className = value;
      break;
    case 'text':
      element.textContent = value;
      break;
    case 'testid':
      element.dataset.testid = value;
      break;
    case 'data':
      for (const [name, data] of Object.entries(value)) {
        if (data !== undefined && data !== null) element.dataset[name] = String(data);
      }
      break;
    case 'attrs':
      for (const [name, attribute] of Object.entries(value)) {
        if (/^on/i.test(name) || name.toLowerCase() === 'style') throw new Error(`refusing attribute ${name}`);
        if (attribute !== undefined && attribute !== null && attribute !== false) element.setAttribute(name, String(attribute));
      }
      break;
    case 'on':
      for (const [event, listener] of Object.entries(value)) element.addEventListener(event, listener);
      break;
    case 'hidden':
    case 'disabled':
    case 'required':
      element[key] = Boolean(value);
      break;
    default:
      element[key] = value;
  }
}
