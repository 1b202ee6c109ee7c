// Dead letters: steps that failed for good and bus messages the bus gave
// up on; inspect one, replay its job.
import {get, post} from './api.js';
import {h, badge, when, shortID, table, dl, section, problem, short} from './dom.js';

export async function deadLettersPage(main, params) {
  const kind = params.get('kind') || '';
  const form = h('form', {class: 'filters', method: 'get', action: '/ui/deadletters'},
    h('label', {}, 'Kind ', h('select', {name: 'kind'}, h('option', {value: ''}, 'any'),
      ['STEP', 'BUS'].map((k) => h('option', {value: k, selected: k === kind}, k)))),
    h('label', {}, 'Job ', h('input', {name: 'job', value: params.get('job') || '', size: 20, placeholder: 'job id'})),
    h('button', {type: 'submit'}, 'Filter'));
  main.replaceChildren(h('h1', {}, 'Dead letters'), form);
  let resp;
  try {
    resp = await get('/v1/deadletters', {kind: kind ? `DEAD_LETTER_KIND_${kind}` : '', job_id: params.get('job'),
      page_size: 100, page_token: params.get('page')});
  } catch (err) {
    main.append(problem(err));
    return;
  }
  const rows = (resp.dead_letters || []).map((d) => h('tr', {'data-dead-letter': d.dead_letter_id},
    h('td', {}, h('a', {href: `/ui/deadletters/${d.dead_letter_id}`}, `#${d.dead_letter_id}`)),
    h('td', {}, short(d.kind, 'DEAD_LETTER_KIND_')),
    h('td', {}, d.job_id ? h('a', {href: `/ui/jobs/${d.job_id}`, class: 'mono'}, shortID(d.job_id)) : '—'),
    h('td', {class: 'mono'}, d.step_id || d.entity || ''), h('td', {}, d.reason), h('td', {class: 'time'}, when(d.create_time)),
    h('td', {}, d.replay_job_id ? h('a', {href: `/ui/jobs/${d.replay_job_id}`, class: 'mono'}, shortID(d.replay_job_id)) : '')));
  main.append(table(['Dead letter', 'Kind', 'Job', 'Step / entity', 'Reason', 'When', 'Replayed as'], rows,
    {id: 'dead-letters', class: 'list'}));
  if (!rows.length) main.append(h('p', {class: 'muted'}, 'No dead letters.'));
  if (resp.next_page_token) {
    const next = new URLSearchParams(params);
    next.set('page', resp.next_page_token);
    main.append(h('p', {}, h('a', {href: `/ui/deadletters?${next}`}, 'Older →')));
  }
}

export async function deadLetterPage(main, id) {
  main.replaceChildren(h('h1', {}, `Dead letter #${id}`));
  let d, job;
  try {
    ({dead_letter: d} = await get(`/v1/deadletters/${id}`));
    if (d.job_id) ({job} = await get(`/v1/jobs/${d.job_id}`).catch(() => ({})));
  } catch (err) {
    main.append(problem(err));
    return;
  }
  const note = h('span', {class: 'note', id: 'action-note'});
  const actions = h('div', {class: 'actions'});
  if (d.job_id && !d.replay_job_id) {
    const replay = h('button', {type: 'button', id: 'replay'}, 'Replay job');
    replay.disabled = !job || job.status !== 'JOB_STATUS_FAILED_FINAL';
    if (replay.disabled) note.textContent = 'Only a job that failed for good can be replayed.';
    replay.addEventListener('click', async () => {
      replay.disabled = true;
      try {
        const r = await post(`/v1/jobs/${d.job_id}:replay`, {reason: `replay of dead letter #${d.dead_letter_id}`});
        location.assign(`/ui/jobs/${r.job.job_id}`);
      } catch (err) {
        note.textContent = err.message;
        replay.disabled = false;
      }
    });
    actions.append(replay);
  }
  actions.append(note);
  main.append(section('What failed', dl([
    ['Kind', short(d.kind, 'DEAD_LETTER_KIND_')],
    ['Job', d.job_id ? h('a', {href: `/ui/jobs/${d.job_id}`, class: 'mono'}, d.job_id) : '—'],
    job && ['Job status', badge(job.status, 'JOB_STATUS_')],
    ['Step', d.step_id ? `${d.step_id} (attempt ${d.attempt_no || 0})` : '—'],
    ['Reason', h('span', {id: 'dl-reason'}, d.reason)], ['Description', d.description],
    d.entity && ['Entity', d.entity], d.message_id && ['Message id', d.message_id],
    ['When', when(d.create_time)],
    ['Replayed as', d.replay_job_id ? h('a', {href: `/ui/jobs/${d.replay_job_id}`, class: 'mono'}, d.replay_job_id) : '—'],
  ]), actions));
  if (d.properties && Object.keys(d.properties).length) {
    main.append(section('Properties', dl(Object.entries(d.properties))));
  }
  if (d.body) main.append(section('Message body', h('pre', {class: 'json'}, d.body)));
}
