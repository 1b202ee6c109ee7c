// Draws a workflow's DAG as SVG: nodes in columns by their longest path
// from a root, edges as curves. Statuses colour nodes (class st-<STATUS>);
// a conditional's taken edge is solid, the others dashed once it decided.
import {s} from './dom.js';

const W = 156, H = 58, GX = 44, GY = 22, PAD = 16;

// layout assigns each node a column (longest path from a root) and a row.
function layout(nodes, edges) {
  const ids = nodes.map((n) => n.id);
  const level = new Map(ids.map((id) => [id, 0]));
  const indeg = new Map(ids.map((id) => [id, 0]));
  const out = new Map(ids.map((id) => [id, []]));
  for (const e of edges) {
    if (!level.has(e.from) || !level.has(e.to)) continue;
    out.get(e.from).push(e.to);
    indeg.set(e.to, indeg.get(e.to) + 1);
  }
  const queue = ids.filter((id) => indeg.get(id) === 0);
  const seen = new Set();
  while (queue.length) {
    const id = queue.shift();
    seen.add(id);
    for (const to of out.get(id)) {
      level.set(to, Math.max(level.get(to), level.get(id) + 1));
      indeg.set(to, indeg.get(to) - 1);
      if (indeg.get(to) === 0) queue.push(to);
    }
  }
  // A cycle (not a valid workflow) still draws: its nodes stay in column 0.
  const columns = [];
  for (const n of nodes) {
    const c = seen.has(n.id) ? level.get(n.id) : 0;
    (columns[c] = columns[c] || []).push(n.id);
  }
  const pos = new Map();
  const rows = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
  columns.forEach((col, c) => {
    if (!col) return;
    const offset = (rows - col.length) * (H + GY) / 2;
    col.forEach((id, r) => pos.set(id, {x: PAD + c * (W + GX), y: PAD + offset + r * (H + GY)}));
  });
  return {pos, width: PAD * 2 + columns.length * (W + GX) - GX, height: PAD * 2 + rows * (H + GY) - GY};
}

// drawDAG returns an <svg> of nodes [{id, type, label, detail, status}] and
// edges [{from, to, taken}] (taken: true, false, or undefined for undecided).
export function drawDAG(nodes, edges) {
  const {pos, width, height} = layout(nodes, edges);
  const svg = s('svg', {class: 'dag', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img',
    'aria-label': 'workflow graph'});
  svg.append(s('defs', {}, s('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 9,
    markerHeight: 9, markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse'}, s('path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead'}))));
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    const cls = e.taken === true ? 'edge taken' : e.taken === false ? 'edge not-taken' : 'edge';
    svg.append(s('path', {class: cls, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`,
      'marker-end': 'url(#arrow)', 'data-from': e.from, 'data-to': e.to}));
  }
  for (const n of nodes) {
    const p = pos.get(n.id);
    const status = n.status || 'NONE';
    const g = s('g', {class: `node type-${n.type} st-${status}`, transform: `translate(${p.x},${p.y})`,
      'data-node': n.id, 'data-status': status});
    g.append(s('title', {}, `${n.id} (${n.type}): ${status}`));
    g.append(s('rect', {width: W, height: H, rx: n.type === 'start' || n.type === 'end' ? 27 : 6}));
    g.append(s('text', {x: 10, y: 18, class: 'label'}, clip(n.label || n.id, 20)));
    g.append(s('text', {x: 10, y: 34, class: 'detail'}, clip(n.detail || n.type, 24)));
    g.append(s('text', {x: 10, y: 50, class: 'status'}, status === 'NONE' ? '' : status));
    svg.append(g);
  }
  return svg;
}

function clip(t, n) {
  return t.length > n ? t.slice(0, n - 1) + '…' : t;
}
