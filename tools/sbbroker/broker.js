// A Service-Bus-compatible AMQP 1.0 test broker for Lucius's bus tests.
//
// The real azservicebus Go client talks to it over plain AMQP (a connection
// string with UseDevelopmentEmulator=true, which keeps the endpoint's port)
// and its admin client over plain HTTP (the ATOM management API, the subset
// that package sbbus uses). Everything is in memory; it is not a production
// broker. What it does, as Service Bus does:
//
//   - SASL ANONYMOUS and PLAIN (the SDK uses ANONYMOUS, then $cbs put-token,
//     which accepts any token).
//   - Queues, topics and subscriptions with rules: TrueFilter, FalseFilter,
//     SqlFilter "1=1"/"1=0" and CorrelationFilter on application properties
//     (other SQL filters are refused with 400).
//   - Peek-lock with link credit and drain: the lock token is the delivery tag
//     (.NET GUID byte order) and x-opt-lock-token; accepted = Complete,
//     modified = Abandon (counts as a delivery, as Service Bus's abandon
//     does), released = given back unseen (the SDK's releaser; not counted),
//     rejected with com.microsoft:dead-letter = DeadLetter with
//     DeadLetterReason/DeadLetterErrorDescription. A settlement without a
//     valid lock is answered rejected com.microsoft:message-lock-lost.
//   - Lock expiry redelivers, MaxDeliveryCount dead-letters
//     (MaxDeliveryCountExceeded), TTL dead-letters (TTLExpiredException) or
//     drops, scheduled enqueue (x-opt-scheduled-enqueue-time), duplicate
//     detection by message id within the window, batches (format 0x80013700)
//     enqueued atomically, a 256 KB max message size as on the Standard tier.
//   - Annotations x-opt-sequence-number, x-opt-enqueued-time,
//     x-opt-locked-until, x-opt-scheduled-enqueue-time, x-opt-deadletter-source.
//   - $management: renew-lock, update-disposition, schedule-message,
//     cancel-scheduled-message, peek-message (x-opt-message-state scheduled
//     or active).
//   - Runtime properties in the GET of a queue, topic or subscription
//     (MessageCount and CountDetails: active, scheduled and dead-letter
//     counts). As on Service Bus, a message scheduled to a topic counts on
//     the topic until its time, not on its subscriptions.
//   - "q/$deadletterqueue" and "t/subscriptions/s/$deadletterqueue".
//
// Not supported: sessions, deferral's receive-by-sequence-number,
// transactions, auto-forwarding, partitioning, WebSockets and TLS.
//
// Usage: node broker.js --amqp-port N --http-port M [--host 127.0.0.1]
// It prints "sbbroker listening amqp=N http=M" once both ports listen and
// exits when its stdin closes. SBBROKER_DEBUG=1 logs to stderr.
'use strict';

const http = require('http');
const crypto = require('crypto');
const rhea = require('rhea');

const types = rhea.types;
const amqpMessage = rhea.message;

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const HOST = arg('host', '127.0.0.1');
const AMQP_PORT = Number(arg('amqp-port', '5672'));
const HTTP_PORT = Number(arg('http-port', '5300'));
const DEBUG = !!process.env.SBBROKER_DEBUG;
// Standard tier's limit, so batches split as they do on Azure.
const MAX_MESSAGE_SIZE = 256 * 1024;
function debug(...a) { if (DEBUG) console.error('[sbbroker]', ...a); }

// ---------- durations ----------

// parseDuration reads an ISO 8601 duration (as .NET TimeSpans serialise) into ms.
function parseDuration(s, def) {
  if (!s) return def;
  const m = /^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/.exec(s.trim());
  if (!m) return def;
  const [, d, h, mi, se] = m.map((x) => (x === undefined ? 0 : Number(x)));
  return Math.round((((d * 24 + h) * 60 + mi) * 60 + se) * 1000);
}

// ---------- XML (the ATOM subset the SDK sends) ----------

function unescapeXML(s) {
  return s.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&amp;/g, '&');
}
function tag(xml, name) {
  const m = new RegExp('<(?:\\w+:)?' + name + '(?:\\s[^>]*)?>([\\s\\S]*?)</(?:\\w+:)?' + name + '>').exec(xml);
  return m ? unescapeXML(m[1]) : undefined;
}
function rawTag(xml, name) {
  const m = new RegExp('<(?:\\w+:)?' + name + '(?:\\s[^>]*)?>([\\s\\S]*?)</(?:\\w+:)?' + name + '>').exec(xml);
  return m ? m[1] : undefined;
}
function boolTag(xml, name, def) {
  const v = tag(xml, name);
  return v === undefined ? def : v.trim() === 'true';
}
function intTag(xml, name, def) {
  const v = tag(xml, name);
  return v === undefined ? def : Number(v);
}

// parseFilter reads a rule's filter: null matches everything (TrueFilter,
// SqlFilter "1=1"), false nothing (FalseFilter, SqlFilter "1=0"), else an
// object of application properties that must all be equal (CorrelationFilter;
// its system-property fields are not supported). Other SQL filters throw.
function parseFilter(ruleXML) {
  if (!ruleXML) return null;
  const filter = rawTag(ruleXML, 'Filter');
  if (filter === undefined) return null;
  const type = /<(?:\w+:)?Filter\s[^>]*type="(?:\w+:)?(\w+)"/.exec(ruleXML);
  const kind = type ? type[1] : '';
  if (kind === 'TrueFilter') return null;
  if (kind === 'FalseFilter') return false;
  if (kind === 'SqlFilter') {
    const expr = (tag(filter, 'SqlExpression') || '').replace(/\s/g, '');
    if (expr === '1=1') return null;
    if (expr === '1=0') return false;
    throw new BadRequest('SQL filters are not supported by the test broker: ' + expr);
  }
  if (kind !== 'CorrelationFilter') throw new BadRequest('unsupported filter type ' + kind);
  const props = {};
  const kvs = filter.match(/<(?:\w+:)?KeyValueOfstringanyType>[\s\S]*?<\/(?:\w+:)?KeyValueOfstringanyType>/g) || [];
  for (const kv of kvs) props[tag(kv, 'Key')] = tag(kv, 'Value') || '';
  return props;
}

class BadRequest extends Error {}

// ---------- entities ----------

const DAY = 24 * 3600 * 1000;

class Store {
  // A queue, a subscription or a dead-letter queue: messages received with peek-lock.
  constructor(path, props, isDLQ) {
    this.path = path;
    this.props = props;
    this.messages = []; // in sequence order
    this.links = new Set(); // broker-side sender links reading this store
    this.rr = 0;
    if (!isDLQ) this.dlq = new Store(path + '/$deadletterqueue', props, true);
    this.isDLQ = !!isDLQ;
  }
}

const queues = new Map(); // name -> {props, store, seq, dedupe}
const topics = new Map(); // name -> {props, subs: Map(name -> {props, store, rules: Map})}
let seqCounter = 0;

function queueProps(xml) {
  return {
    lockDuration: parseDuration(tag(xml, 'LockDuration'), 60000),
    maxDeliveryCount: intTag(xml, 'MaxDeliveryCount', 10),
    defaultTTL: parseDuration(tag(xml, 'DefaultMessageTimeToLive'), 14 * DAY),
    deadLetterOnExpiration: boolTag(xml, 'DeadLetteringOnMessageExpiration', false),
    requiresDuplicateDetection: boolTag(xml, 'RequiresDuplicateDetection', false),
    duplicateWindow: parseDuration(tag(xml, 'DuplicateDetectionHistoryTimeWindow'), 10 * 60000),
  };
}

// resolve maps an AMQP address to what it names.
function resolve(address) {
  let a = (address || '').replace(/^amqps?:\/\/[^/]+\//, '').replace(/^\//, '');
  let dlq = false;
  if (/\/\$deadletterqueue$/i.test(a)) { dlq = true; a = a.replace(/\/\$deadletterqueue$/i, ''); }
  const parts = a.split('/');
  if (parts.length === 1) {
    const q = queues.get(parts[0].toLowerCase());
    if (q) return { kind: 'queue', queue: q, store: dlq ? q.store.dlq : q.store };
    const t = topics.get(parts[0].toLowerCase());
    if (t && !dlq) return { kind: 'topic', topic: t };
    return null;
  }
  if (parts.length === 3 && parts[1].toLowerCase() === 'subscriptions') {
    const t = topics.get(parts[0].toLowerCase());
    const s = t && t.subs.get(parts[2].toLowerCase());
    if (s) return { kind: 'subscription', sub: s, store: dlq ? s.store.dlq : s.store };
  }
  return null;
}

function allStores() {
  const out = [];
  for (const q of queues.values()) out.push(q.store, q.store.dlq);
  for (const t of topics.values()) for (const s of t.subs.values()) out.push(s.store, s.store.dlq);
  return out;
}

// ---------- messages ----------

function annotation(msg, key) {
  return msg.message_annotations ? msg.message_annotations[key] : undefined;
}
function asMillis(v) {
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'number') return v;
  return undefined;
}

// isDuplicate records id for dedupe and tells whether it was seen in the window.
function isDuplicate(entity, id, now) {
  if (!entity.props.requiresDuplicateDetection || id === undefined || id === null) return false;
  const key = String(id);
  for (const [k, until] of entity.dedupe) if (until <= now) entity.dedupe.delete(k);
  if (entity.dedupe.has(key)) return true;
  entity.dedupe.set(key, now + entity.props.duplicateWindow);
  return false;
}

function matches(rules, props) {
  for (const filter of rules.values()) {
    if (filter === null) return true;
    if (filter === false) continue;
    let ok = true;
    for (const k of Object.keys(filter)) {
      if (!props || props[k] === undefined || String(props[k]) !== filter[k]) { ok = false; break; }
    }
    if (ok) return true;
  }
  return false;
}

function newRecord(msg, seq, now, store, entityTTL) {
  const scheduled = asMillis(annotation(msg, 'x-opt-scheduled-enqueue-time'));
  const ttl = msg.ttl && msg.ttl > 0 ? Math.min(msg.ttl, entityTTL) : entityTTL;
  const availableAt = scheduled && scheduled > now ? scheduled : now;
  return {
    msg,
    seq,
    enqueuedAt: availableAt,
    scheduledAt: scheduled,
    availableAt,
    expiresAt: availableAt + ttl,
    deliveries: 0,
    lockToken: null,
    lockedUntil: 0,
    delivery: null,
    store,
  };
}

// enqueue accepts one decoded message sent to a queue or topic.
function enqueue(target, msg, now) {
  const id = msg.message_id;
  if (target.kind === 'queue') {
    const q = target.queue;
    if (isDuplicate(q, id, now)) { debug('duplicate', q.name, id); return []; }
    const r = newRecord(msg, ++seqCounter, now, q.store, q.props.defaultTTL);
    q.store.messages.push(r);
    return [r];
  }
  const t = target.topic;
  if (isDuplicate(t, id, now)) { debug('duplicate', t.name, id); return []; }
  const seq = ++seqCounter;
  const out = [];
  for (const s of t.subs.values()) {
    if (!matches(s.rules, msg.application_properties)) continue;
    const copy = Object.assign({}, msg);
    const r = newRecord(copy, seq, now, s.store, Math.min(s.props.defaultTTL, t.props.defaultTTL));
    s.store.messages.push(r);
    out.push(r);
  }
  return out;
}

function removeRecord(r) {
  const i = r.store.messages.indexOf(r);
  if (i >= 0) r.store.messages.splice(i, 1);
  r.lockToken = null;
}

function deadLetter(r, reason, description, now) {
  removeRecord(r);
  const dlq = r.store.dlq;
  if (!dlq) return; // dead-letter queues keep their messages
  const msg = Object.assign({}, r.msg);
  msg.application_properties = Object.assign({}, msg.application_properties || {}, {
    DeadLetterReason: reason,
    DeadLetterErrorDescription: description,
  });
  const d = newRecord(msg, r.seq, now, dlq, 100 * 365 * DAY);
  d.enqueuedAt = r.enqueuedAt;
  dlq.messages.push(d);
  dlq.messages.sort((a, b) => a.seq - b.seq);
  debug('dead-lettered', r.store.path, msg.message_id, reason);
}

// unlock makes a locked message available again (abandon or lock expiry).
function unlock(r, now) {
  r.lockToken = null;
  r.lockedUntil = 0;
  r.delivery = null;
  if (!r.store.isDLQ && r.deliveries >= r.store.props.maxDeliveryCount) {
    deadLetter(r, 'MaxDeliveryCountExceeded', 'Message could not be consumed after ' + r.deliveries + ' delivery attempts.', now);
  }
}

// sweep expires locks and TTLs of one store.
function sweep(store, now) {
  for (const r of store.messages.slice()) {
    if (r.lockToken && r.lockedUntil <= now) unlock(r, now);
    if (!r.lockToken && r.store === store && r.expiresAt <= now && !store.isDLQ) {
      if (store.props.deadLetterOnExpiration) deadLetter(r, 'TTLExpiredException', 'The message expired and was dead lettered.', now);
      else removeRecord(r);
    }
  }
}

// ---------- lock tokens ----------

function newToken() {
  return crypto.randomBytes(16);
}
// .NET GUID byte order, which the SDK swaps back when it reads a delivery tag.
function dotnetGuid(b) {
  const t = Buffer.from(b);
  [t[0], t[3]] = [t[3], t[0]];
  [t[1], t[2]] = [t[2], t[1]];
  [t[4], t[5]] = [t[5], t[4]];
  [t[6], t[7]] = [t[7], t[6]];
  return t;
}
const locks = new Map(); // token hex -> record

// ---------- delivery ----------

function outgoing(r, locked) {
  const m = r.msg;
  const ann = Object.assign({}, m.message_annotations || {});
  ann['x-opt-sequence-number'] = types.wrap_long(r.seq);
  ann['x-opt-enqueued-time'] = types.wrap_timestamp(r.enqueuedAt);
  if (locked) ann['x-opt-locked-until'] = types.wrap_timestamp(r.lockedUntil);
  if (r.scheduledAt) ann['x-opt-scheduled-enqueue-time'] = types.wrap_timestamp(r.scheduledAt);
  else delete ann['x-opt-scheduled-enqueue-time'];
  if (r.store.isDLQ) ann['x-opt-deadletter-source'] = r.store.path.replace(/\/\$deadletterqueue$/, '');
  const out = {
    message_id: m.message_id,
    correlation_id: m.correlation_id,
    subject: m.subject,
    content_type: m.content_type,
    to: m.to,
    reply_to: m.reply_to,
    group_id: m.group_id,
    application_properties: m.application_properties,
    message_annotations: ann,
    delivery_count: Math.max(0, r.deliveries - 1),
    body: m.body,
  };
  if (m.ttl) out.ttl = m.ttl;
  if (locked) out.delivery_annotations = { 'x-opt-lock-token': types.wrap_uuid(r.lockBytes) };
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  return out;
}

function pump(store) {
  if (!store.links.size) return;
  const now = Date.now();
  sweep(store, now);
  const links = Array.from(store.links);
  let progress = true;
  while (progress) {
    progress = false;
    for (let i = 0; i < links.length; i++) {
      const link = links[(store.rr + i) % links.length];
      if (!link.is_open() || link.credit <= 0) continue;
      const r = store.messages.find((x) => !x.lockToken && x.availableAt <= now);
      if (!r) break;
      const peekLock = link.local.attach.snd_settle_mode !== 1;
      r.deliveries++;
      if (peekLock) {
        const token = newToken();
        r.lockBytes = token;
        r.lockToken = token.toString('hex');
        r.lockedUntil = now + store.props.lockDuration;
        locks.set(r.lockToken, r);
        const d = link.send(outgoing(r, true), dotnetGuid(token));
        d.sb = { record: r, token: r.lockToken };
        r.delivery = d;
      } else {
        link.send(outgoing(r, false));
        removeRecord(r);
      }
      store.rr++;
      progress = true;
    }
  }
  for (const link of links) {
    if (link.is_open() && link.is_draining && link.is_draining()) link.set_drained(true);
    else if (link.is_open() && link._draining) link.set_drained(true);
  }
}

function pumpAll() {
  const now = Date.now();
  for (const s of allStores()) {
    if (s.links.size) pump(s);
    else sweep(s, now);
  }
  for (const [k, r] of locks) if (r.lockToken !== k) locks.delete(k);
}
setInterval(pumpAll, 25).unref();

// settle answers a receiver's disposition of one delivery.
function settle(delivery, outcome, state) {
  const now = Date.now();
  const sb = delivery.sb;
  if (delivery.sbSettled) return; // rhea may report one disposition under two names
  delivery.sbSettled = true;
  if (!sb) { delivery.update(true, amqpMessage.accepted().described()); return; }
  const r = sb.record;
  if (r.lockToken !== sb.token || r.lockedUntil <= now) {
    debug('lock lost on', outcome, r.msg.message_id);
    delivery.update(true, amqpMessage.rejected({ error: { condition: 'com.microsoft:message-lock-lost', description: 'The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.' } }).described());
    return;
  }
  switch (outcome) {
    case 'accepted':
      removeRecord(r);
      break;
    case 'modified':
      unlock(r, now);
      break;
    case 'released':
      r.deliveries = Math.max(0, r.deliveries - 1); // never handed to the application
      unlock(r, now);
      break;
    case 'rejected': {
      const err = state && state.error;
      const info = (err && err.info) || {};
      if (err && err.condition === 'com.microsoft:dead-letter') {
        deadLetter(r, String(info.DeadLetterReason || ''), String(info.DeadLetterErrorDescription || ''), now);
      } else {
        unlock(r, now);
      }
      break;
    }
  }
  delivery.update(true, amqpMessage.accepted().described());
  pump(r.store);
}

// ---------- request/response nodes ($cbs, $management) ----------

function respond(connection, request, status, description, body) {
  const replyTo = request.reply_to;
  let link = null;
  connection.each_link((l) => {
    if (!link && l.is_sender() && l.remote.attach && l.remote.attach.target && l.remote.attach.target.address === replyTo) link = l;
    if (!link && l.is_sender() && l.local.attach && l.local.attach.target && l.local.attach.target.address === replyTo) link = l;
  });
  if (!link) { debug('no reply link for', replyTo); return; }
  link.send({
    correlation_id: request.message_id,
    application_properties: { 'status-code': types.wrap_int(status), 'status-description': description },
    body: body === undefined ? null : body,
  });
}

function management(context, address, req) {
  const op = req.application_properties && req.application_properties.operation;
  const entityPath = address.replace(/\/\$management$/i, '');
  const target = resolve(entityPath);
  const now = Date.now();
  debug('management', op, entityPath);
  if (!target) return respond(context.connection, req, 404, 'entity not found: ' + entityPath);
  const body = req.body || {};
  switch (op) {
    case 'com.microsoft:renew-lock': {
      const expirations = [];
      for (const t of body['lock-tokens'] || []) {
        const r = locks.get(Buffer.from(t).toString('hex'));
        if (!r || r.lockToken !== Buffer.from(t).toString('hex') || r.lockedUntil <= now) {
          return respond(context.connection, req, 410, 'The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.');
        }
        r.lockedUntil = now + r.store.props.lockDuration;
        expirations.push(r.lockedUntil);
      }
      return respond(context.connection, req, 200, '', { expirations: types.wrap_array(expirations, 0x83) });
    }
    case 'com.microsoft:update-disposition': {
      // Settlement through the management link (deferred messages, or after
      // the receiving link was lost).
      const status = body['disposition-status'];
      for (const t of body['lock-tokens'] || []) {
        const hex = Buffer.from(t).toString('hex');
        const r = locks.get(hex);
        if (!r || r.lockToken !== hex || r.lockedUntil <= now) {
          return respond(context.connection, req, 410, 'The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.');
        }
        if (status === 'completed') removeRecord(r);
        else if (status === 'suspended') deadLetter(r, String(body['deadletter-reason'] || ''), String(body['deadletter-description'] || ''), now);
        else unlock(r, now);
        pump(r.store);
      }
      return respond(context.connection, req, 200, '');
    }
    case 'com.microsoft:schedule-message': {
      const seqs = [];
      for (const entry of body.messages || []) {
        const msg = amqpMessage.decode(Buffer.from(entry.message));
        for (const r of enqueue(target, msg, now)) seqs.push(r.seq);
      }
      respond(context.connection, req, 200, '', { 'sequence-numbers': types.wrap_array(seqs.map((s) => types.wrap_long(s).value), 0x81) });
      return;
    }
    case 'com.microsoft:cancel-scheduled-message': {
      const seqs = new Set((body['sequence-numbers'] || []).map((s) => Number(s)));
      const stores = target.kind === 'queue' ? [target.store] : target.kind === 'topic' ? Array.from(target.topic.subs.values(), (s) => s.store) : [target.store];
      for (const s of stores) for (const r of s.messages.slice()) if (seqs.has(r.seq) && r.availableAt > now) removeRecord(r);
      return respond(context.connection, req, 200, '');
    }
    case 'com.microsoft:peek-message': {
      if (!target.store) return respond(context.connection, req, 400, 'peek needs a queue or subscription');
      sweep(target.store, now);
      const from = Number(body['from-sequence-number'] || 0);
      const count = Number(body['message-count'] || 1);
      const found = target.store.messages.filter((r) => r.seq >= from).slice(0, count);
      if (!found.length) return respond(context.connection, req, 204, 'No messages');
      const messages = found.map((r) => {
        const m = outgoing(r, false);
        m.message_annotations['x-opt-message-state'] = types.wrap_int(r.availableAt > now ? 2 : 0); // 2: scheduled
        return { message: amqpMessage.encode(m) };
      });
      return respond(context.connection, req, 200, '', { messages });
    }
    default:
      return respond(context.connection, req, 501, 'operation not supported by the test broker: ' + op);
  }
}

// ---------- AMQP container ----------

const container = rhea.create_container({ id: 'lucius-sbbroker', treat_modified_as_released: false });
container.sasl_server_mechanisms.enable_anonymous();
container.sasl_server_mechanisms.enable_plain(() => true);

container.on('connection_open', (context) => debug('connection open', context.connection.container_id));

// A client's receiver: the broker sends from its source.
// mirrorModes answers an attach with the settle modes the client asked for:
// go-amqp detaches a link whose modes differ from its request.
function mirrorModes(link) {
  const remote = link.remote.attach;
  if (remote.snd_settle_mode !== undefined) link.local.attach.snd_settle_mode = remote.snd_settle_mode;
  if (remote.rcv_settle_mode !== undefined) link.local.attach.rcv_settle_mode = remote.rcv_settle_mode;
}

container.on('sender_open', (context) => {
  const link = context.sender;
  mirrorModes(link);
  const source = link.remote.attach.source || {};
  const address = source.address || '';
  if (address === '$cbs' || /\$management$/i.test(address) || link.remote.attach.target) {
    if (address === '$cbs' || /\$management$/i.test(address)) {
      link.set_source({ address });
      link.set_target(link.remote.attach.target);
      return; // reply link
    }
  }
  const target = resolve(address);
  if (!target || !target.store) {
    debug('receiver for missing entity', address);
    link.local.attach.source = null; // a nil terminus, as for senders
    link.close({ condition: 'amqp:not-found', description: 'The messaging entity ' + address + ' could not be found.' });
    return;
  }
  link.set_source({ address });
  link.sbStore = target.store;
  target.store.links.add(link);
  debug('receiver attached', address, 'settle', link.local.attach.snd_settle_mode);
});

container.on('sendable', (context) => { if (context.sender.sbStore) pump(context.sender.sbStore); });
container.on('sender_draining', (context) => { if (context.sender.sbStore) pump(context.sender.sbStore); else context.sender.set_drained(true); });

function dropLink(link) {
  if (link.sbStore) link.sbStore.links.delete(link);
}
container.on('sender_close', (context) => dropLink(context.sender));
container.on('connection_close', (context) => context.connection.each_link(dropLink));
container.on('disconnected', (context) => { if (context.connection) context.connection.each_link(dropLink); });

container.on('accepted', (context) => settle(context.delivery, 'accepted'));
container.on('released', (context) => settle(context.delivery, 'released'));
container.on('modified', (context) => settle(context.delivery, 'modified', context.delivery.remote_state));
container.on('rejected', (context) => settle(context.delivery, 'rejected', context.delivery.remote_state));

// A client's sender: the broker receives at its target.
container.on('receiver_open', (context) => {
  const link = context.receiver;
  mirrorModes(link);
  const address = (link.remote.attach.target || {}).address || '';
  if (address === '$cbs' || /\$management$/i.test(address)) {
    link.set_target({ address });
    return;
  }
  const target = resolve(address);
  if (!target || target.kind === 'subscription' || (target.store && target.store.isDLQ)) {
    debug('sender for missing entity', address);
    link.local.attach.target = null; // a nil terminus: go-amqp then waits for the detach and its error
    link.close({ condition: 'amqp:not-found', description: 'The messaging entity ' + address + ' could not be found.' });
    return;
  }
  link.set_target({ address });
  link.local.attach.max_message_size = MAX_MESSAGE_SIZE; // the SDK sizes batches by it
});

container.on('message', (context) => {
  const link = context.receiver;
  const address = (link.remote.attach.target || {}).address || '';
  const delivery = context.delivery;
  if (address === '$cbs') {
    respond(context.connection, context.message, 202, 'Accepted');
    return;
  }
  if (/\$management$/i.test(address)) {
    management(context, address, context.message);
    return;
  }
  const target = resolve(address);
  if (!target) {
    delivery.reject({ condition: 'amqp:not-found', description: 'The messaging entity ' + address + ' could not be found.' });
    return;
  }
  const now = Date.now();
  let msgs;
  if (context.format === 0x80013700) {
    const envelope = amqpMessage.decode(context.message);
    const body = envelope.body;
    const parts = body && body.multiple ? body.content : [body && body.content !== undefined ? body.content : body];
    msgs = parts.map((p) => amqpMessage.decode(Buffer.from(p)));
  } else {
    msgs = [context.message];
  }
  // A batch is one transfer: every message in it is enqueued, or none.
  const stores = new Set();
  for (const m of msgs) for (const r of enqueue(target, m, now)) stores.add(r.store);
  delivery.accept();
  for (const s of stores) pump(s);
});

container.on('error', (err) => debug('container error', err && err.message));

// ---------- management REST (ATOM), the subset the admin client uses ----------

function entry(title, body) {
  return '<entry xmlns="http://www.w3.org/2005/Atom"><title type="text">' + title + '</title><content type="application/xml">' + body + '</content></entry>';
}

// counts are a store's message counts as its runtime properties report them.
function counts(store, now) {
  sweep(store, now);
  let active = 0;
  let scheduled = 0;
  for (const r of store.messages) if (r.availableAt > now) scheduled++; else active++;
  return { active, scheduled, dead: store.dlq.messages.length };
}

// topicCounts counts the messages scheduled to a topic: Service Bus keeps
// them in the topic until their time (the broker keeps their copies in the
// subscriptions, so its subscriptions leave them out).
function topicCounts(t, now) {
  const seqs = new Set();
  for (const s of t.subs.values()) for (const r of s.store.messages) if (r.availableAt > now) seqs.add(r.seq);
  return { active: 0, scheduled: seqs.size, dead: 0 };
}

// withRuntime adds the runtime properties the admin client's
// Get*RuntimeProperties read to an entity's stored description (the
// timestamps are the request's).
function withRuntime(xml, c) {
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const count = (name, v) => '<d2p1:' + name + '>' + v + '</d2p1:' + name + '>';
  const runtime = '<MessageCount>' + (c.active + c.scheduled + c.dead) + '</MessageCount><SizeInBytes>0</SizeInBytes>' +
    '<CreatedAt>' + now + '</CreatedAt><UpdatedAt>' + now + '</UpdatedAt><AccessedAt>' + now + '</AccessedAt>' +
    '<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus">' +
    count('ActiveMessageCount', c.active) + count('DeadLetterMessageCount', c.dead) + count('ScheduledMessageCount', c.scheduled) +
    count('TransferMessageCount', 0) + count('TransferDeadLetterMessageCount', 0) + '</CountDetails>';
  return xml.replace(/(<\/(?:\w+:)?(?:Queue|Topic|Subscription)Description>\s*)$/, runtime + '$1');
}

function handleHTTP(req, res) {
  let data = '';
  req.on('data', (c) => { data += c; });
  req.on('end', () => {
    const url = new URL(req.url, 'http://localhost');
    const parts = decodeURIComponent(url.pathname).replace(/^\/+|\/+$/g, '').split('/');
    const update = !!req.headers['if-match'];
    const reply = (code, body) => {
      res.writeHead(code, { 'Content-Type': 'application/atom+xml;type=entry;charset=utf-8' });
      res.end(body || '');
    };
    const content = rawTag(data, 'content') || '';
    debug('http', req.method, url.pathname, update ? 'update' : '');
    try {
      const names = parts.map((p) => p.toLowerCase());
      if (parts.length === 1) {
        const name = names[0];
        const isTopic = /TopicDescription/.test(content) || (req.method !== 'PUT' && topics.has(name));
        const map = isTopic ? topics : queues;
        const other = isTopic ? queues : topics;
        if (req.method === 'GET') {
          const e = map.get(name);
          if (!e) return reply(404);
          return reply(200, entry(parts[0], withRuntime(e.xml, isTopic ? topicCounts(e, Date.now()) : counts(e.store, Date.now()))));
        }
        if (req.method === 'DELETE') return map.delete(name) ? reply(200) : reply(404);
        if (req.method !== 'PUT') return reply(405);
        const props = queueProps(content);
        if (update) {
          const e = map.get(name);
          if (!e) return reply(404, 'not found');
          e.props = props;
          e.xml = content;
          if (e.store) { e.store.props = props; e.store.dlq.props = props; }
          return reply(200, data);
        }
        if (map.has(name) || other.has(name)) return reply(409, 'conflict');
        if (isTopic) topics.set(name, { name: parts[0], props, xml: content, subs: new Map(), dedupe: new Map() });
        else queues.set(name, { name: parts[0], props, xml: content, store: new Store(parts[0], props), dedupe: new Map() });
        return reply(201, data);
      }
      if (parts.length >= 3 && names[1] === 'subscriptions') {
        const t = topics.get(names[0]);
        if (!t) return reply(404, 'topic not found');
        const subName = names[2];
        if (parts.length === 3) {
          if (req.method === 'GET') {
            const s = t.subs.get(subName);
            if (!s) return reply(404);
            return reply(200, entry(parts[2], withRuntime(s.xml, Object.assign(counts(s.store, Date.now()), { scheduled: 0 }))));
          }
          if (req.method === 'DELETE') return t.subs.delete(subName) ? reply(200) : reply(404);
          const props = queueProps(content);
          props.requiresDuplicateDetection = false;
          if (update) {
            const s = t.subs.get(subName);
            if (!s) return reply(404, 'not found');
            s.props = props; s.store.props = props; s.store.dlq.props = props; s.xml = content;
            return reply(200, data);
          }
          if (t.subs.has(subName)) return reply(409, 'conflict');
          const rules = new Map();
          const defaultRule = rawTag(content, 'DefaultRuleDescription');
          if (defaultRule) rules.set((tag(defaultRule, 'Name') || '$Default').toLowerCase(), parseFilter(defaultRule));
          else rules.set('$default', null);
          t.subs.set(subName, { props, xml: content, store: new Store(t.name + '/Subscriptions/' + parts[2], props), rules });
          return reply(201, data);
        }
        const s = t.subs.get(subName);
        if (!s) return reply(404, 'subscription not found');
        if (parts.length === 5 && names[3] === 'rules') {
          const ruleName = names[4];
          if (req.method === 'GET') return s.rules.has(ruleName) ? reply(200, entry(parts[4], '')) : reply(404);
          if (req.method === 'DELETE') return s.rules.delete(ruleName) ? reply(200) : reply(404);
          if (update && !s.rules.has(ruleName)) return reply(404, 'rule not found');
          if (!update && s.rules.has(ruleName)) return reply(409, 'conflict');
          s.rules.set(ruleName, parseFilter(content));
          // Service Bus answers with the rule's action; the SDK reads it.
          const answer = /<(\w+:)?Action[\s>\/]/.test(data) ? data : data.replace(/<\/((?:\w+:)?)RuleDescription>/, '<$1Action i:type="EmptyRuleAction" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"/></$1RuleDescription>');
          return reply(update ? 200 : 201, answer);
        }
      }
      return reply(404, 'unknown path');
    } catch (err) {
      if (err instanceof BadRequest) return reply(400, err.message);
      console.error('sbbroker http error', err);
      return reply(500, String(err));
    }
  });
}

// ---------- start ----------

const httpServer = http.createServer(handleHTTP);
const amqpServer = container.listen({ port: AMQP_PORT, host: HOST });
let listening = 0;
function ready() {
  if (++listening === 2) console.log('sbbroker listening amqp=' + AMQP_PORT + ' http=' + HTTP_PORT);
}
amqpServer.on('listening', ready);
amqpServer.on('error', (err) => { console.error('sbbroker amqp listen:', err.message); process.exit(1); });
httpServer.on('error', (err) => { console.error('sbbroker http listen:', err.message); process.exit(1); });
httpServer.listen(HTTP_PORT, HOST, ready);

// Stop when the parent closes stdin, so a killed test leaves no broker behind.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
