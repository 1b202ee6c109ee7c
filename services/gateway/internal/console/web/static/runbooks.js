// Runbooks and their batches: phases with their step counts, init steps,
// and each member's step executions.
import {get} from './api.js';
import {h, when, table, dl, section, problem, short, badge} from './dom.js';

export async function runbooksPage(main) {
  main.replaceChildren(h('h1', {}, 'Runbooks'));
  let resp;
  try {
    resp = await get('/v1/runbooks', {page_size: 500});
  } catch (err) {
    main.append(problem(err));
    return;
  }
  main.append(table(['Runbook', 'Version', 'Active', 'Phases', 'Description'], (resp.runbooks || []).map((r) =>
    h('tr', {'data-runbook': r.name}, h('td', {}, h('a', {href: `/ui/runbooks/${r.name}`}, r.name)), h('td', {}, `v${r.version}`),
      h('td', {}, r.active ? 'yes' : 'no'), h('td', {}, (r.phases || []).map((p) => p.name).join(', ')),
      h('td', {}, r.description || ''))), {id: 'runbooks', class: 'list'}));
  if (!(resp.runbooks || []).length) main.append(h('p', {class: 'muted'}, 'No runbooks.'));
}

export async function runbookPage(main, name) {
  main.replaceChildren(h('h1', {}, `Runbook ${name}`));
  let rb, batches;
  try {
    [{runbook: rb}, {batches}] = await Promise.all([get(`/v1/runbooks/${name}`),
      get(`/v1/runbooks/${name}/batches`, {page_size: 100})]);
  } catch (err) {
    main.append(problem(err));
    return;
  }
  main.append(section(`v${rb.version}`, dl([['Description', rb.description], ['Active', rb.active ? 'yes' : 'no'],
    ['Member table', rb.data_table], ['Columns', (rb.columns || []).join(', ')],
    ['Overdue', short(rb.overdue_behavior, 'OVERDUE_BEHAVIOR_')]])),
  section('Phases', table(['Phase', 'Due', 'Steps'], (rb.phases || []).map((p) => h('tr', {},
    h('td', {}, p.name), h('td', {}, offset(p.offset_minutes)),
    h('td', {}, (p.steps || []).map((st) => `${st.name} (${st.worker_id}.${st.function}${st.is_poll_step ? ', polls' : ''})`).join(' → ')))),
  {class: 'list'})),
  section('Batches', table(['Batch', 'Start', 'Status', 'Members', 'Detected', 'Completed'], (batches || []).map((b) =>
    h('tr', {'data-batch': b.batch_id}, h('td', {}, h('a', {href: `/ui/batches/${b.batch_id}`}, `#${b.batch_id}`)),
      h('td', {class: 'time'}, when(b.batch_start_time)), h('td', {}, badge(b.status, 'BATCH_STATUS_')),
      h('td', {}, `${b.active_member_count || 0} active, ${b.removed_member_count || 0} removed`),
      h('td', {class: 'time'}, when(b.detect_time)), h('td', {class: 'time'}, when(b.complete_time)))), {id: 'batches', class: 'list'})));
}

function offset(min) {
  const m = Number(min || 0);
  if (m === 0) return 'at the batch start';
  const a = Math.abs(m);
  const t = a % 1440 === 0 ? `${a / 1440} d` : a % 60 === 0 ? `${a / 60} h` : `${a} min`;
  return m > 0 ? `${t} before the start` : `${t} after the start`;
}

export async function batchPage(main, id) {
  main.replaceChildren(h('h1', {}, `Batch #${id}`));
  let b, members;
  try {
    [{batch: b}, {members}] = await Promise.all([get(`/v1/batches/${id}`), get(`/v1/batches/${id}/members`, {page_size: 500})]);
  } catch (err) {
    main.append(problem(err));
    return;
  }
  members = members || [];
  main.append(section('Batch', dl([
    ['Runbook', h('a', {href: `/ui/runbooks/${b.runbook_name}`}, `${b.runbook_name} v${b.runbook_version}`)],
    ['Start', when(b.batch_start_time)], ['Status', badge(b.status, 'BATCH_STATUS_')],
    ['Members', `${b.active_member_count || 0} active, ${b.removed_member_count || 0} removed`],
    ['Detected', when(b.detect_time)], ['Init dispatched', when(b.init_dispatch_time)], ['Completed', when(b.complete_time)],
  ])),
  section('Phases', table(['Phase', 'Due', 'Status', 'Dispatched', 'Completed', 'Steps'], (b.phase_executions || []).map((p) => {
    const c = p.step_counts || {};
    return h('tr', {'data-phase': p.phase_name}, h('td', {}, p.phase_name), h('td', {class: 'time'}, when(p.due_time)),
      h('td', {}, badge(p.status, 'PHASE_EXECUTION_STATUS_')), h('td', {class: 'time'}, when(p.dispatch_time)), h('td', {class: 'time'}, when(p.complete_time)),
      h('td', {}, `${c.total || 0}: ✓${c.succeeded || 0} ▶${(c.dispatched || 0) + (c.polling || 0)} ✗${c.failed || 0} …${c.pending || 0}`));
  }), {id: 'phases', class: 'list'})),
  (b.init_executions || []).length ? section('Init steps', table(['Step', 'Function', 'Status', 'Job', 'Error'],
    b.init_executions.map((e) => h('tr', {}, h('td', {}, e.step_name), h('td', {}, `${e.worker_id}.${e.function}`),
      h('td', {}, badge(e.status, 'STEP_EXECUTION_STATUS_')), h('td', {}, e.job_id ? h('a', {href: `/ui/jobs/${e.job_id}`}, 'job') : ''),
      h('td', {}, e.error_message || ''))), {class: 'list'})) : '',
  section('Members', memberGrid(members)));
}

// memberGrid: one row a member, one column a (phase, step), each cell its state.
function memberGrid(members) {
  if (!members.length) return h('p', {class: 'muted'}, 'No members.');
  const cols = [];
  const key = (st) => `${st.phase_name || st.kind}/${st.step_index}/${st.step_name}`;
  for (const m of members) for (const st of m.steps || []) if (!cols.includes(key(st))) cols.push(key(st));
  const rows = members.map((m) => {
    const by = new Map((m.steps || []).map((st) => [key(st), st]));
    return h('tr', {'data-member': m.member_key}, h('td', {class: 'mono'}, m.member_key),
      h('td', {}, short(m.status, 'BATCH_MEMBER_STATUS_')), cols.map((c) => {
        const st = by.get(c);
        if (!st) return h('td', {}, '');
        const cell = badge(st.status, 'STEP_EXECUTION_STATUS_');
        return h('td', {title: st.error_message || ''}, st.job_id ? h('a', {href: `/ui/jobs/${st.job_id}`}, cell) : cell);
      }));
  });
  return h('div', {class: 'scroll'}, table(['Member', 'Status', ...cols.map((c) => c.split('/').filter((_, i) => i !== 1).join(' · '))],
    rows, {id: 'members', class: 'list'}));
}
