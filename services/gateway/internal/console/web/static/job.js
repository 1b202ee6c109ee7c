// One job: its DAG coloured by status, a timeline of each step's attempts
// (ACK, lease, retries, routing), its event log, cancel and replay; all
// updated live by WatchJob.
import {get, post, stream} from './api.js';
import {h, s, badge, short, when, dl, section, problem, table} from './dom.js';
import {drawDAG} from './dag.js';

const TERMINAL = ['JOB_STATUS_SUCCEEDED', 'JOB_STATUS_FAILED_FINAL', 'JOB_STATUS_CANCELLED'];
const CHILDREN_SHOWN = 50; // a 1,000-way fan-out's timeline shows this many children
const unfolded = new Set(); // fan-outs whose children the user opened: kept across live redraws

async function allEvents(id) {
  const events = [];
  let token = '';
  for (let i = 0; i < 10; i++) {
    const r = await get(`/v1/jobs/${id}/events`, {page_size: 1000, page_token: token});
    events.push(...(r.events || []));
    if (!(token = r.next_page_token)) break;
  }
  return events;
}

export async function jobPage(main, id) {
  let job, steps, events, workflow;
  try {
    // Events first: the steps read after them are at least as new, so the
    // watch that follows the last event misses no change of theirs.
    events = await allEvents(id);
    [{job}, {steps}] = await Promise.all([get(`/v1/jobs/${id}`), get(`/v1/jobs/${id}/steps`, {view: 'STEP_VIEW_FULL', page_size: 5000})]);
    ({workflow} = await get(`/v1/workflows/${job.workflow_id}`, {version: job.workflow_version}).catch(() => ({})));
  } catch (err) {
    main.replaceChildren(h('h1', {}, 'Job'), problem(err));
    return;
  }
  steps = steps || [];
  const head = h('div', {id: 'job-head'});
  const graph = h('div', {id: 'dag', class: 'scroll'});
  const timeline = h('div', {id: 'timeline'});
  const eventRows = h('tbody', {});
  const log = h('table', {id: 'events', class: 'list'},
    h('thead', {}, h('tr', {}, ['#', 'Time', 'Type', 'Step', 'Attempt', 'Transition', 'Reason', 'Data'].map((x) => h('th', {}, x)))),
    eventRows);
  const live = h('span', {class: 'live', id: 'live'}, '');
  main.replaceChildren(h('h1', {}, 'Job ', live), head, section('Graph', graph), section('Attempts', timeline),
    section('Events', h('div', {class: 'scroll tall'}, log)));

  const render = () => {
    head.replaceChildren(header(job, (j) => { job = j; render(); }));
    graph.replaceChildren(workflow ? dagOf(workflow, steps) : h('p', {class: 'muted'}, 'The workflow definition is not readable.'));
    timeline.replaceChildren(attempts(job, steps));
  };
  render();
  for (const e of events) eventRows.append(eventRow(e));

  if (TERMINAL.includes(job.status)) {
    live.textContent = 'ended';
    return;
  }
  // Live: events as they commit; steps re-read (at most every 250 ms) after them.
  let pending = null;
  const refresh = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      try {
        [{job}, {steps}] = await Promise.all([get(`/v1/jobs/${id}`),
          get(`/v1/jobs/${id}/steps`, {view: 'STEP_VIEW_FULL', page_size: 5000})]);
        steps = steps || [];
        render();
      } catch (err) {
        live.textContent = err.message;
      }
    }, 250);
  };
  const last = events.length ? Number(events[events.length - 1].event_id) : 0;
  const watch = stream((after) => `/v1/jobs/${id}:watch?after_event_id=${after}`, (res) => {
    live.textContent = 'live';
    live.classList.add('on');
    if (res.event) {
      eventRows.append(eventRow(res.event));
      refresh();
    }
    if (res.job) {
      job = res.job;
      render();
    }
  }, () => {
    if (!TERMINAL.includes(job.status)) return false;
    live.textContent = 'ended';
    live.classList.remove('on');
    refresh();
    return true;
  }, refresh); // on (re)open: re-read, for what changed while it was closed
  watch.start(last);
  live.textContent = 'live';
  live.classList.add('on');
  return () => watch.stop();
}

function header(job, update) {
  const actions = h('div', {class: 'actions'});
  const note = h('span', {class: 'note', id: 'action-note'});
  if (!TERMINAL.includes(job.status)) {
    const confirm = h('button', {type: 'button', id: 'cancel-confirm', class: 'danger', hidden: true}, 'Yes, cancel it');
    const cancel = h('button', {type: 'button', id: 'cancel'}, 'Cancel job');
    cancel.addEventListener('click', () => { confirm.hidden = false; cancel.hidden = true; });
    confirm.addEventListener('click', async () => {
      confirm.disabled = true;
      try {
        const r = await post(`/v1/jobs/${job.job_id}:cancel`, {reason: 'cancelled from the console'});
        note.textContent = 'Cancellation requested.';
        update(r.job);
      } catch (err) {
        note.textContent = err.message;
        confirm.disabled = false;
      }
    });
    actions.append(cancel, confirm);
  }
  if (job.status === 'JOB_STATUS_FAILED_FINAL') {
    const replay = h('button', {type: 'button', id: 'replay'}, 'Replay job');
    replay.addEventListener('click', async () => {
      replay.disabled = true;
      try {
        const r = await post(`/v1/jobs/${job.job_id}:replay`, {reason: 'replayed from the console'});
        location.assign(`/ui/jobs/${r.job.job_id}`);
      } catch (err) {
        note.textContent = err.message;
        replay.disabled = false;
      }
    });
    actions.append(replay);
  }
  actions.append(note);
  const r = job.routing || {};
  return h('div', {class: 'card'},
    h('div', {class: 'title-row'}, h('code', {id: 'job-id', class: 'mono big'}, job.job_id),
      h('span', {id: 'job-status'}, badge(job.status, 'JOB_STATUS_'))),
    dl([
      ['Tenant', job.tenant_id],
      ['Workflow', h('a', {href: `/ui/workflows/${job.workflow_id}?version=${job.workflow_version}`},
        `${job.workflow_id} v${job.workflow_version}`)],
      ['Accepted', when(job.create_time)], ['Updated', when(job.update_time)],
      job.complete_time && ['Completed', when(job.complete_time)],
      job.reason && ['Reason', job.reason],
      ['Routing', `${r.resolved_mode || '?'} · partition ${r.partition ?? 0} · ${r.topic || ''} (${short(r.decision_source, 'DECISION_SOURCE_')})`],
      job.replay_of && ['Replays', h('a', {href: `/ui/jobs/${job.replay_of}`, class: 'mono'}, job.replay_of)],
      job.submitted_by && ['Submitted by', job.submitted_by],
      job.result_ref && ['Result', job.result_ref],
    ]),
    actions);
}

// dagOf joins the definition's nodes with the job's steps.
function dagOf(workflow, steps) {
  const byNode = new Map();
  for (const st of steps) if (st.kind !== 'child') byNode.set(st.node_id || st.step_id, st);
  const nodes = (workflow.nodes || []).map((n) => {
    const st = byNode.get(n.node_id);
    let detail = n.handler ? `${n.type} · ${n.handler}` : n.type;
    if (n.type === 'fan_out' && st && st.children) {
      const c = st.children;
      detail = `×${c.total || 0}: ✓${c.succeeded || 0} ▶${c.running || 0} ✗${c.failed || 0} …${c.pending || 0}`;
    }
    if (n.type === 'conditional' && st && st.output && st.output.branch) detail = `→ ${st.output.branch}`;
    return {id: n.node_id, type: n.type, label: n.node_id, detail, status: st ? short(st.status, 'STEP_STATUS_') : 'NONE'};
  });
  const edges = [];
  for (const n of workflow.nodes || []) {
    const st = byNode.get(n.node_id);
    const decided = n.type === 'conditional' && st && st.output && st.output.branch;
    for (const to of n.next || []) edges.push({from: n.node_id, to, taken: decided ? st.output.branch === to : undefined});
  }
  return drawDAG(nodes, edges);
}

// attempts draws, per step that runs work, its attempts on one time axis.
// A fan-out's children are folded under one row with their counts.
function attempts(job, steps) {
  const work = steps.filter((st) => st.kind === 'task' || st.kind === 'child' || (!st.kind && st.step_type));
  if (!work.length) return h('p', {class: 'muted'}, 'No step has run yet.');
  const t0 = Date.parse(job.create_time);
  const tEnd = job.complete_time ? Date.parse(job.complete_time) : Date.now();
  const span = Math.max(tEnd - t0, 1000);
  const x = (ts) => (ts ? Math.min(100, Math.max(0, ((Date.parse(ts) - t0) / span) * 100)) : null);
  const fanOuts = new Map(steps.filter((st) => st.kind === 'fan_out').map((st) => [st.step_id, st]));
  const rows = [];
  const folds = new Map(); // fan-out step id → its children's rows
  for (const st of work) {
    const mine = stepRows(st, x);
    if (st.kind !== 'child') {
      rows.push(...mine);
      continue;
    }
    const parent = st.parent_step_id || st.node_id;
    if (!folds.has(parent)) {
      const fold = {rows: [], shown: 0, head: null};
      const c = (fanOuts.get(parent) || {}).children || {};
      const toggle = h('button', {type: 'button', class: 'quiet-dark', 'data-fold': parent}, unfolded.has(parent) ? 'hide' : 'show');
      fold.head = h('tr', {class: 'fold', 'data-fold': parent},
        h('td', {class: 'mono'}, `${parent}[…]`),
        h('td', {}, `${c.total || 0} children`),
        h('td', {}, `✓${c.succeeded || 0} ▶${c.running || 0} ✗${c.failed || 0} …${c.pending || 0}`),
        h('td', {}, toggle));
      toggle.addEventListener('click', () => {
        const open = toggle.textContent === 'show';
        toggle.textContent = open ? 'hide' : 'show';
        if (open) unfolded.add(parent); else unfolded.delete(parent);
        for (const r of fold.rows) r.hidden = !open;
      });
      folds.set(parent, fold);
      rows.push(fold.head);
    }
    const fold = folds.get(parent);
    if (++fold.shown > CHILDREN_SHOWN) continue;
    for (const r of mine) {
      r.hidden = !unfolded.has(parent);
      fold.rows.push(r);
    }
    rows.push(...mine);
  }
  for (const [parent, fold] of folds) {
    if (fold.shown > CHILDREN_SHOWN) {
      const more = h('tr', {hidden: !unfolded.has(parent)}, h('td', {colspan: 4, class: 'muted'},
        `… and ${fold.shown - CHILDREN_SHOWN} more children of ${parent} (counted above and on the graph).`));
      fold.rows.push(more);
      const last = fold.rows[fold.rows.length - 2];
      last.after(more);
    }
  }
  return h('div', {},
    h('p', {class: 'muted small'}, `Time axis: ${when(job.create_time)} → ${job.complete_time ? when(job.complete_time) : 'now'}.` +
      ' Light: waiting for ACK; solid: acknowledged, coloured by outcome.'),
    table(['Step', 'Status', 'Attempts', 'Timeline'], rows, {class: 'list timeline'}));
}

// stepRows is a step's row (with its timeline bar) and one row per attempt.
function stepRows(st, x) {
  const bar = s('svg', {class: 'bar', viewBox: '0 0 100 10', preserveAspectRatio: 'none', width: '100%', height: 14});
  for (const a of st.attempts || []) {
    const start = x(a.create_time), ack = x(a.ack_time), end = x(a.complete_time) ?? 100;
    const name = short(a.status, 'STEP_STATUS_');
    bar.append(s('rect', {class: 'wait', x: start, y: 2, width: Math.max((ack ?? end) - start, 0.3), height: 6}));
    if (ack !== null) bar.append(s('rect', {class: `run st-${name}`, x: ack, y: 1, width: Math.max(end - ack, 0.3), height: 8}));
  }
  const rows = [h('tr', {class: 'step', 'data-step': st.step_id, 'data-status': short(st.status, 'STEP_STATUS_')},
    h('td', {class: 'mono'}, st.step_id), h('td', {}, badge(st.status, 'STEP_STATUS_')),
    h('td', {}, `${st.attempt_no || 0}/${st.max_attempts || '?'}`), h('td', {class: 'barcell'}, bar))];
  for (const a of st.attempts || []) {
    const r = a.routing || {};
    rows.push(h('tr', {class: 'attempt', 'data-step': st.step_id, 'data-attempt': a.attempt_no},
      h('td', {}, `  attempt ${a.attempt_no}`), h('td', {}, badge(a.status, 'STEP_STATUS_')), h('td', {}, a.worker_id || ''),
      h('td', {class: 'small'},
        `dispatched ${when(a.create_time)} · ACK ${a.ack_time ? when(a.ack_time) : `due ${when(a.ack_deadline)}`}` +
        ` · lease ${a.lease_expire_time ? `until ${when(a.lease_expire_time)}` : '—'}` +
        ` · ${a.complete_time ? `done ${when(a.complete_time)}` : 'running'}` +
        ` · ${r.resolved_mode || '?'} p${r.partition ?? 0} ${r.topic || ''}` +
        (a.failure_class || a.reason ? ` · ${a.failure_class || ''} ${a.reason || ''}` : ''))));
  }
  return rows;
}

function eventRow(e) {
  const data = e.data && Object.keys(e.data).length ? JSON.stringify(e.data) : '';
  return h('tr', {'data-event': e.event_id, 'data-type': e.type},
    h('td', {}, e.event_id), h('td', {class: 'time'}, when(e.create_time)), h('td', {}, e.type), h('td', {class: 'mono'}, e.step_id || ''),
    h('td', {}, e.attempt_no || ''), h('td', {}, e.from_status || e.to_status ? `${e.from_status || '∅'} → ${e.to_status || ''}` : ''),
    h('td', {}, e.reason || ''), h('td', {class: 'data'}, data));
}

