// The jobs page: filters by tenant, status, workflow and time, newest first,
// updated live by WatchJobs.
import {get, stream} from './api.js';
import {h, badge, when, shortID, table, problem} from './dom.js';

const STATUSES = ['RECEIVED', 'QUEUED', 'DISPATCHING', 'IN_PROGRESS', 'SUCCEEDED', 'FAILED_RETRY', 'FAILED_FINAL',
  'CANCELLING', 'CANCELLED'];

function isoOrEmpty(local) {
  if (!local) return '';
  const d = new Date(local);
  return isNaN(d) ? '' : d.toISOString();
}

export async function jobsPage(main, params) {
  const f = {
    tenant: params.get('tenant') || '', status: params.get('status') || '', workflow: params.get('workflow') || '',
    from: params.get('from') || '', to: params.get('to') || '', page: params.get('page') || '',
  };
  const workflows = await get('/v1/workflows', {page_size: 500}).catch(() => ({workflows: []}));
  const form = h('form', {class: 'filters', method: 'get', action: '/ui/jobs', id: 'job-filters'},
    h('label', {}, 'Tenant ', h('input', {name: 'tenant', value: f.tenant, placeholder: 'any', size: 12})),
    h('label', {}, 'Status ', h('select', {name: 'status'}, h('option', {value: ''}, 'any'),
      STATUSES.map((st) => h('option', {value: st, selected: st === f.status}, st)))),
    h('label', {}, 'Workflow ', h('select', {name: 'workflow'}, h('option', {value: ''}, 'any'),
      (workflows.workflows || []).map((w) => h('option', {value: w.workflow_id, selected: w.workflow_id === f.workflow},
        w.workflow_id)))),
    h('label', {}, 'From ', h('input', {type: 'datetime-local', name: 'from', value: f.from})),
    h('label', {}, 'To ', h('input', {type: 'datetime-local', name: 'to', value: f.to})),
    h('button', {type: 'submit'}, 'Filter'));
  const live = h('span', {class: 'live', id: 'live'}, 'connecting…');
  main.replaceChildren(h('h1', {}, 'Jobs ', live), form);

  let resp;
  try {
    resp = await get('/v1/jobs', {
      tenant_id: f.tenant, statuses: f.status ? `JOB_STATUS_${f.status}` : '', workflow_id: f.workflow,
      create_time_after: isoOrEmpty(f.from), create_time_before: isoOrEmpty(f.to), page_size: 50, page_token: f.page,
    });
  } catch (err) {
    main.append(problem(err));
    return;
  }
  const rows = new Map();
  const tbody = [];
  for (const j of resp.jobs || []) {
    const tr = row(j);
    rows.set(j.job_id, tr);
    tbody.push(tr);
  }
  const list = table(['Job', 'Tenant', 'Workflow', 'Status', 'Accepted', 'Updated', 'Reason'], tbody, {id: 'jobs', class: 'list'});
  main.append(list);
  if (!tbody.length) main.append(h('p', {class: 'muted', id: 'no-jobs'}, 'No jobs match.'));
  if (resp.next_page_token) {
    const next = new URLSearchParams(params);
    next.set('page', resp.next_page_token);
    main.append(h('p', {}, h('a', {href: `/ui/jobs?${next}`, id: 'next-page'}, 'Older jobs →')));
  }

  // Live: new and changed jobs of the filter's tenant (or all the caller sees).
  const matches = (j) => (!f.status || j.status === `JOB_STATUS_${f.status}`) &&
    (!f.workflow || j.workflow_id === f.workflow) &&
    (!f.from || new Date(j.create_time) >= new Date(f.from)) && (!f.to || new Date(j.create_time) < new Date(f.to));
  const watch = stream((after) => `/v1/jobs:watch?${new URLSearchParams({tenant_id: f.tenant, after_event_id: after})}`,
    (res) => {
      live.textContent = 'live';
      live.classList.add('on');
      const j = res.job;
      if (!j) return;
      const old = rows.get(j.job_id);
      const tr = row(j);
      if (old) {
        old.replaceWith(tr);
      } else if (!f.page && matches(j)) {
        list.tBodies[0].prepend(tr);
        document.getElementById('no-jobs')?.remove();
      } else {
        return;
      }
      rows.set(j.job_id, tr);
      tr.classList.add('flash');
    });
  watch.start(0);
  live.textContent = 'live';
  live.classList.add('on');
  return () => watch.stop();
}

function row(j) {
  return h('tr', {'data-job': j.job_id},
    h('td', {}, h('a', {href: `/ui/jobs/${j.job_id}`, class: 'mono', title: j.job_id}, shortID(j.job_id))),
    h('td', {}, j.tenant_id),
    h('td', {}, h('a', {href: `/ui/workflows/${j.workflow_id}?version=${j.workflow_version || ''}`},
      `${j.workflow_id} v${j.workflow_version || '?'}`)),
    h('td', {}, badge(j.status, 'JOB_STATUS_')),
    h('td', {class: 'time'}, when(j.create_time)),
    h('td', {class: 'time'}, when(j.update_time)),
    h('td', {class: 'reason'}, j.reason || ''));
}
