// The console's entry point: reads the session, then draws the page the
// path names. Pages are plain links; each page load reads what it shows
// from the REST API.
import {loadSession, logout} from './api.js';
import {h, problem} from './dom.js';
import {jobsPage} from './jobs.js';
import {jobPage} from './job.js';
import {deadLettersPage, deadLetterPage} from './deadletters.js';
import {workflowsPage, workflowPage} from './workflows.js';
import {runbooksPage, runbookPage, batchPage} from './runbooks.js';
import {tenantsPage, tenantPage} from './tenants.js';

const routes = [
  [/^\/ui\/(jobs\/?)?$/, 'jobs', (m, p) => jobsPage(m, p)],
  [/^\/ui\/jobs\/([0-9a-f]{64})$/, 'jobs', (m, p, id) => jobPage(m, id)],
  [/^\/ui\/deadletters\/?$/, 'deadletters', (m, p) => deadLettersPage(m, p)],
  [/^\/ui\/deadletters\/(\d+)$/, 'deadletters', (m, p, id) => deadLetterPage(m, id)],
  [/^\/ui\/workflows\/?$/, 'workflows', (m) => workflowsPage(m)],
  [/^\/ui\/workflows\/([A-Za-z][A-Za-z0-9_]*)$/, 'workflows', (m, p, id) => workflowPage(m, id, p)],
  [/^\/ui\/runbooks\/?$/, 'runbooks', (m) => runbooksPage(m)],
  [/^\/ui\/runbooks\/([a-z][a-z0-9-]*)$/, 'runbooks', (m, p, name) => runbookPage(m, name)],
  [/^\/ui\/batches\/(\d+)$/, 'runbooks', (m, p, id) => batchPage(m, id)],
  [/^\/ui\/tenants\/?$/, 'tenants', (m, p) => (p.get('tenant') ? location.assign(`/ui/tenants/${encodeURIComponent(p.get('tenant').trim().toLowerCase())}`) : tenantsPage(m))],
  [/^\/ui\/tenants\/([^/]+)$/, 'tenants', (m, p, t) => tenantPage(m, decodeURIComponent(t))],
];

async function start() {
  const main = document.getElementById('main');
  document.getElementById('logout').addEventListener('click', () => logout());
  let me;
  try {
    me = await loadSession();
  } catch (err) {
    main.replaceChildren(problem(err));
    return;
  }
  document.getElementById('who').textContent =
    `${me.principal} · ${(me.roles || []).join(', ')}${me.operator ? '' : ` · ${(me.tenants || []).join(', ')}`}`;
  if (!me.operator) {
    // Runbooks are the operators' (the API answers 403): no link to them.
    document.querySelector('#nav a[data-page="runbooks"]')?.remove();
  }
  const path = location.pathname;
  for (const [re, nav, page] of routes) {
    const m = path.match(re);
    if (!m) continue;
    document.querySelector(`#nav a[data-page="${nav}"]`)?.classList.add('current');
    try {
      await page(main, new URLSearchParams(location.search), m[1]);
    } catch (err) {
      main.append(problem(err));
    }
    document.body.dataset.ready = 'true';
    return;
  }
  main.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, 'No console page has this address.'));
  document.body.dataset.ready = 'true';
}

start();
