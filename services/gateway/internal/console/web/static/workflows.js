// Workflow definitions: every workflow, and each version with its DAG,
// inputs and source.
import {get} from './api.js';
import {h, when, table, dl, section, problem} from './dom.js';
import {drawDAG} from './dag.js';

export async function workflowsPage(main) {
  main.replaceChildren(h('h1', {}, 'Workflows'));
  let resp;
  try {
    resp = await get('/v1/workflows', {page_size: 500});
  } catch (err) {
    main.append(problem(err));
    return;
  }
  main.append(table(['Workflow', 'Latest version', 'Name', 'Nodes', 'Registered', 'By'],
    (resp.workflows || []).map((w) => h('tr', {'data-workflow': w.workflow_id},
      h('td', {}, h('a', {href: `/ui/workflows/${w.workflow_id}`}, w.workflow_id)), h('td', {}, `v${w.version}`),
      h('td', {}, w.name || ''), h('td', {}, (w.nodes || []).length), h('td', {class: 'time'}, when(w.register_time)),
      h('td', {}, w.registered_by || ''))), {id: 'workflows', class: 'list'}));
}

export async function workflowPage(main, id, params) {
  main.replaceChildren(h('h1', {}, `Workflow ${id}`));
  let w, latest;
  try {
    ({workflow: latest} = await get(`/v1/workflows/${id}`));
    w = latest;
    const v = Number(params.get('version') || 0);
    if (v && v !== latest.version) ({workflow: w} = await get(`/v1/workflows/${id}`, {version: v}));
  } catch (err) {
    main.append(problem(err));
    return;
  }
  const versions = h('nav', {class: 'versions', id: 'versions'}, 'Versions: ',
    Array.from({length: latest.version}, (_, i) => latest.version - i).map((v) =>
      v === w.version ? h('strong', {}, `v${v}`) : h('a', {href: `/ui/workflows/${id}?version=${v}`}, `v${v}`)));
  const nodes = (w.nodes || []).map((n) => ({id: n.node_id, type: n.type, label: n.node_id,
    detail: n.handler ? `${n.type} · ${n.handler}` : n.type}));
  const edges = (w.nodes || []).flatMap((n) => (n.next || []).map((to) => ({from: n.node_id, to})));
  main.append(versions,
    section(`v${w.version}${w.name ? ` — ${w.name}` : ''}`, dl([
      ['Description', w.description], ['Registered', when(w.register_time)], ['By', w.registered_by], ['SHA-256', w.sha256],
    ])),
    section('Graph', h('div', {class: 'scroll', id: 'dag'}, drawDAG(nodes, edges))),
    section('Inputs', table(['Name', 'Type', 'Required', 'Default'], (w.inputs || []).map((i) => h('tr', {},
      h('td', {}, i.name), h('td', {}, i.type), h('td', {}, i.required ? 'yes' : 'no'),
      h('td', {}, i.default_value === undefined ? '' : JSON.stringify(i.default_value)))), {class: 'list'})),
    section('Nodes', table(['Node', 'Type', 'Handler', 'Service', 'Next'], (w.nodes || []).map((n) => h('tr', {},
      h('td', {}, n.node_id), h('td', {}, n.type), h('td', {}, n.handler || ''), h('td', {}, n.service || ''),
      h('td', {}, (n.next || []).join(', ')))), {class: 'list'})),
    section('Source', h('pre', {class: 'source'}, w.source || '')));
}
