// The gateway's REST API, called with the session cookie. Every change
// carries the session's CSRF token; a lost session goes back to sign in.

let session = null;

export class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    const info = (body && body.details || []).find((d) => d.reason);
    this.reason = info ? info.reason : '';
  }
}

export async function loadSession() {
  const r = await fetch('/ui/session', {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  if (r.status === 401) {
    location.assign('/ui/login');
    throw new APIError(401, {message: 'signed out'});
  }
  session = await r.json();
  return session;
}

export function currentSession() {
  return session;
}

export async function api(method, path, body) {
  const headers = {Accept: 'application/json'};
  if (method !== 'GET') {
    headers['Content-Type'] = 'application/json';
    headers['X-CSRF-Token'] = session ? session.csrf_token : '';
  }
  const r = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) {
    location.assign('/ui/login');
  }
  const text = await r.text();
  const data = text ? JSON.parse(text) : {};
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

export function get(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    for (const x of [].concat(v)) if (x !== undefined && x !== null && x !== '') q.append(k, x);
  }
  const qs = q.toString();
  return api('GET', qs ? `${path}?${qs}` : path);
}

export function post(path, body) {
  return api('POST', path, body || {});
}

// stream follows a watch RPC as Server-Sent Events. onMessage gets each
// result; when the stream drops, it resumes after the last event seen
// (resume(lastEventID) returns the URL), unless onEnd says it is over.
// onOpen runs each time the stream (re)opens.
export function stream(resume, onMessage, onEnd, onOpen) {
  let last = 0;
  let source = null;
  let stopped = false;
  const open = () => {
    source = new EventSource(resume(last));
    source.onopen = () => { if (onOpen) onOpen(); };
    source.onmessage = (m) => {
      const msg = JSON.parse(m.data);
      if (msg.error) return;
      const res = msg.result || {};
      if (res.event && Number(res.event.event_id) > last) last = Number(res.event.event_id);
      onMessage(res);
    };
    source.onerror = () => {
      source.close();
      if (stopped || (onEnd && onEnd())) return;
      setTimeout(() => { if (!stopped) open(); }, 1000);
    };
  };
  return {
    start(after) { last = after || 0; open(); },
    stop() { stopped = true; if (source) source.close(); },
  };
}

export async function logout() {
  await api('POST', '/ui/logout');
  location.assign('/ui/login');
}
