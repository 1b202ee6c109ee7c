// DOM helpers: every text goes in through textContent or attributes, never
// innerHTML, so nothing the API returns can become markup.

const SVG = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h builds an HTML element: h('a', {href: '/x'}, 'text', child…).
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s builds an SVG element.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

// short names an enum value without its prefix: JOB_STATUS_SUCCEEDED → SUCCEEDED.
export function short(v, prefix) {
  if (!v) return '';
  return prefix && v.startsWith(prefix) ? v.slice(prefix.length) : v.replace(/^[A-Z]+_STATUS_/, '');
}

// badge shows a status, coloured by its class st-<STATUS>.
export function badge(status, prefix) {
  const name = short(status, prefix) || 'UNKNOWN';
  return h('span', {class: `badge st-${name}`, 'data-status': name}, name);
}

export function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  return isNaN(d) ? ts : d.toISOString().replace('T', ' ');
}

export function shortID(id) {
  return id && id.length > 16 ? id.slice(0, 12) + '…' : (id || '');
}

export function table(headers, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows));
}

export function dl(pairs) {
  return h('dl', {class: 'facts'}, pairs.filter((p) => p).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
}

export function section(title, ...children) {
  return h('section', {class: 'card'}, h('h2', {}, title), ...children);
}

// problem shows an API error where the page would be.
export function problem(err) {
  return h('div', {class: 'problem', role: 'alert'}, err.message || String(err));
}

export function json(v) {
  return h('pre', {class: 'json'}, JSON.stringify(v, null, 2));
}
