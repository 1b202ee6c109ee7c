// Tenants: configuration and limits (operators), usage (active jobs), and
// pausing or resuming a tenant's work (operators).
import {get, post, currentSession} from './api.js';
import {h, when, table, dl, section, problem, short} from './dom.js';

const ACTIVE = ['RECEIVED', 'QUEUED', 'DISPATCHING', 'IN_PROGRESS', 'FAILED_RETRY', 'CANCELLING'].map((s) => `JOB_STATUS_${s}`);

// activeJobs counts a tenant's unfinished jobs (up to 500: "500+").
async function activeJobs(tenant) {
  const r = await get('/v1/jobs', {tenant_id: tenant, statuses: ACTIVE, page_size: 500});
  const n = (r.jobs || []).length;
  return r.next_page_token ? `${n}+` : String(n);
}

export async function tenantsPage(main) {
  const me = currentSession();
  main.replaceChildren(h('h1', {}, 'Tenants'));
  let tenants = me.tenants || [];
  let configs = new Map(), pauses = [];
  if (me.operator) {
    try {
      const [c, p] = await Promise.all([get('/v1/config/tenants', {page_size: 500}), get('/v1/pauses', {page_size: 500})]);
      configs = new Map((c.configs || []).map((x) => [x.tenant_id, x]));
      pauses = p.pauses || [];
      tenants = [...new Set([...configs.keys(), ...pauses.filter((x) => x.scope === 'PAUSE_SCOPE_TENANT').map((x) => x.key)])].sort();
    } catch (err) {
      main.append(problem(err));
      return;
    }
    main.append(h('form', {class: 'filters', method: 'get', action: '/ui/tenants/'},
      h('label', {}, 'Open tenant ', h('input', {name: 'tenant', size: 16, required: true, id: 'open-tenant'})),
      h('button', {type: 'submit'}, 'Open')));
    const global = pauses.find((x) => x.scope === 'PAUSE_SCOPE_GLOBAL');
    if (global) main.append(h('p', {class: 'problem'}, `All work is paused: ${global.reason || 'no reason given'} (${global.paused_by}).`));
  }
  const usage = await Promise.all(tenants.map((t) => activeJobs(t).catch(() => '?')));
  main.append(table(['Tenant', 'Mode', 'Max active jobs', 'Active jobs', 'Paused'], tenants.map((t, i) => {
    const c = configs.get(t) || {};
    const p = pauses.find((x) => x.scope === 'PAUSE_SCOPE_TENANT' && x.key === t);
    return h('tr', {'data-tenant': t}, h('td', {}, h('a', {href: `/ui/tenants/${t}`}, t)),
      h('td', {}, short(c.mode, 'MODE_') || 'default'), h('td', {}, c.max_active_jobs ?? 'global'), h('td', {}, usage[i]),
      h('td', {}, p ? `yes — ${p.reason || ''}` : 'no'));
  }), {id: 'tenants', class: 'list'}));
  if (!tenants.length) main.append(h('p', {class: 'muted'}, 'No tenant has a configuration or a pause yet.'));
}

export async function tenantPage(main, tenant) {
  const me = currentSession();
  main.replaceChildren(h('h1', {}, `Tenant ${tenant}`));
  const usage = await activeJobs(tenant).catch((err) => err.message);
  main.append(section('Usage', dl([['Active jobs', h('span', {id: 'active-jobs'}, usage)],
    ['Jobs', h('a', {href: `/ui/jobs?tenant=${encodeURIComponent(tenant)}`}, 'list this tenant\'s jobs')]])));
  if (!me.operator) {
    main.append(h('p', {class: 'muted'}, 'Configuration, limits and pauses are for operators.'));
    return;
  }
  let config = null, global, pauses;
  try {
    [{config: global}, {pauses}] = await Promise.all([get('/v1/config/global'), get('/v1/pauses', {page_size: 500})]);
    config = (await get(`/v1/config/tenants/${tenant}`)).config;
  } catch (err) {
    if (err.reason !== 'TENANT_CONFIG_NOT_FOUND') {
      main.append(problem(err));
      return;
    }
  }
  const limits = (global && global.limits) || {};
  const c = config || {};
  main.append(section('Configuration', config ? dl([
    ['Mode', short(c.mode, 'MODE_') || `global (${short(global.default_mode, 'MODE_')})`],
    ['Allowed modes', (c.allowed_modes || []).map((m) => short(m, 'MODE_')).join(', ') || 'both'],
    ['Max active jobs', c.max_active_jobs ?? `global (${limits.tenant_max_active_jobs || 'none'})`],
    ['Request rate', c.request_rate ? `${c.request_rate.requests_per_second}/s, burst ${c.request_rate.burst || '—'}` : 'none'],
    ['Key rate limits', (c.key_rate_limits || []).length],
    ['Webhook secrets', (c.webhook_secrets || []).length],
    ['Revision', c.revision], ['Updated', `${when(c.update_time)} by ${c.updated_by || '—'}`],
  ]) : h('p', {class: 'muted'}, `No overrides: global defaults apply (max active jobs ${limits.tenant_max_active_jobs || 'none'}).`)));

  const paused = (pauses || []).find((x) => x.scope === 'PAUSE_SCOPE_TENANT' && x.key === tenant);
  const note = h('span', {class: 'note', id: 'action-note'});
  const state = h('p', {id: 'pause-state'}, paused
    ? `Paused since ${when(paused.pause_time)} by ${paused.paused_by}: ${paused.reason || 'no reason given'}${paused.refuse_submits ? ' (submits refused)' : ''}.`
    : 'Running.');
  const actions = h('div', {class: 'actions'});
  if (paused) {
    const resume = h('button', {type: 'button', id: 'resume'}, 'Resume');
    resume.addEventListener('click', async () => {
      try {
        await post('/v1/pauses:resume', {scope: 'PAUSE_SCOPE_TENANT', key: tenant});
        location.reload();
      } catch (err) { note.textContent = err.message; }
    });
    actions.append(resume);
  } else {
    const reason = h('input', {id: 'pause-reason', placeholder: 'reason', size: 24});
    const refuse = h('input', {type: 'checkbox', id: 'pause-refuse'});
    const pause = h('button', {type: 'button', id: 'pause', class: 'danger'}, 'Pause');
    pause.addEventListener('click', async () => {
      try {
        await post('/v1/pauses', {scope: 'PAUSE_SCOPE_TENANT', key: tenant, reason: reason.value, refuse_submits: refuse.checked});
        location.reload();
      } catch (err) { note.textContent = err.message; }
    });
    actions.append(reason, h('label', {}, refuse, ' refuse submits'), pause);
  }
  actions.append(note);
  main.append(section('Pause', state, actions));
}
