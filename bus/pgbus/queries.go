package pgbus

// All SQL of the package. Durations travel as microseconds (bigint) and become
// intervals in SQL; lock tokens travel as text and are compared as uuid.

const (
	qEnsureQueue = `
INSERT INTO bus_entities AS e (name, kind, lock_duration, max_delivery_count,
                               dead_letter_on_expiration, default_ttl, duplicate_detection_window)
VALUES ($1, 'queue', $2::bigint * interval '1 microsecond', $3, $4,
        $5::bigint * interval '1 microsecond', $6::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
   SET lock_duration              = excluded.lock_duration,
       max_delivery_count         = excluded.max_delivery_count,
       dead_letter_on_expiration  = excluded.dead_letter_on_expiration,
       default_ttl                = excluded.default_ttl,
       duplicate_detection_window = excluded.duplicate_detection_window,
       updated_at                 = now()
 WHERE e.kind = 'queue'
RETURNING true`

	qEnsureTopic = `
INSERT INTO bus_entities AS e (name, kind, default_ttl, duplicate_detection_window)
VALUES ($1, 'topic', $2::bigint * interval '1 microsecond', $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
   SET default_ttl                = excluded.default_ttl,
       duplicate_detection_window = excluded.duplicate_detection_window,
       updated_at                 = now()
 WHERE e.kind = 'topic'
RETURNING true`

	// Inserts nothing when the topic does not exist.
	qEnsureSubscription = `
INSERT INTO bus_subscriptions AS s (topic, name, lock_duration, max_delivery_count,
                                    dead_letter_on_expiration, default_ttl, filter)
SELECT e.name, $2, $3::bigint * interval '1 microsecond', $4, $5,
       CASE WHEN $6::bigint > 0 THEN $6::bigint * interval '1 microsecond' END, $7::text::jsonb
  FROM bus_entities e
 WHERE e.name = $1 AND e.kind = 'topic'
ON CONFLICT (topic, name) DO UPDATE
   SET lock_duration             = excluded.lock_duration,
       max_delivery_count        = excluded.max_delivery_count,
       dead_letter_on_expiration = excluded.dead_letter_on_expiration,
       default_ttl               = excluded.default_ttl,
       filter                    = excluded.filter,
       updated_at                = now()
RETURNING true`

	qEntityKind = `SELECT kind FROM bus_entities WHERE name = $1`

	qReceivableExists = `SELECT EXISTS (SELECT 1 FROM bus_receivables WHERE path = $1)`

	// qSend publishes a batch to a queue or topic in one statement, so it is
	// atomic and needs one round trip. Duplicates are dropped in two steps: the
	// batch keeps the first message of each id, then the ids are recorded in
	// bus_duplicates, where an unexpired row wins (the conflicting insert
	// returns nothing). Ids are inserted in sorted order so concurrent batches
	// lock them in the same order and cannot deadlock. A topic fans out to one
	// row per subscription whose filter the properties contain. A message TTL
	// is capped by the entity's, as Service Bus does; TTL and the duplicate
	// window count from the (scheduled) enqueue time and the send respectively.
	//
	// Returns whether the entity exists and the paths that received rows.
	qSend = `
WITH e AS (
    SELECT name, kind, default_ttl, duplicate_detection_window
      FROM bus_entities WHERE name = $1
), input AS (
    SELECT *
      FROM unnest($2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[],
                  $7::text[], $8::text[], $9::timestamptz[], $10::bigint[], $11::smallint[])
           WITH ORDINALITY AS i(message_id, body, content_type, properties, key,
                                correlation_id, subject, scheduled_at, ttl_us, priority, ord)
), firsts AS (
    SELECT DISTINCT ON (message_id) * FROM input ORDER BY message_id, ord
), fresh AS (
    INSERT INTO bus_duplicates AS d (entity, message_id, expires_at)
    SELECT e.name, f.message_id, now() + e.duplicate_detection_window
      FROM e, firsts f
     ORDER BY f.message_id
    ON CONFLICT (entity, message_id) DO UPDATE SET expires_at = excluded.expires_at
     WHERE d.expires_at <= now()
    RETURNING d.message_id
), targets AS (
    SELECT e.name AS path, e.default_ttl AS ttl, '{}'::jsonb AS filter
      FROM e WHERE e.kind = 'queue'
    UNION ALL
    SELECT s.path, coalesce(s.default_ttl, e.default_ttl), s.filter
      FROM e JOIN bus_subscriptions s ON s.topic = e.name
     WHERE e.kind = 'topic'
), ins AS (
    INSERT INTO bus_messages (path, available_at, enqueued_at, expires_at, message_id, body,
                              content_type, properties, key, correlation_id, subject, priority)
    SELECT t.path,
           CASE WHEN f.scheduled_at > now() THEN a.at
                ELSE a.at - f.priority * $12::bigint * interval '1 microsecond' END,
           a.at,
           a.at + CASE WHEN f.ttl_us > 0 THEN least(f.ttl_us * interval '1 microsecond', t.ttl) ELSE t.ttl END,
           f.message_id, coalesce(f.body, ''::bytea), f.content_type, a.props, f.key,
           f.correlation_id, f.subject, f.priority
      FROM firsts f
      JOIN fresh USING (message_id)
     CROSS JOIN LATERAL (SELECT greatest(now(), coalesce(f.scheduled_at, now())) AS at,
                                f.properties::jsonb AS props) a
      JOIN targets t ON t.filter <@ a.props
     ORDER BY f.ord, t.path
    RETURNING path
)
SELECT EXISTS (SELECT 1 FROM e), ARRAY(SELECT DISTINCT path FROM ins)`

	// qClaim locks up to $3 available messages of path $1 (whose options are
	// those of $2, the queue or subscription) in one statement. Rows other
	// claimers hold are skipped. Of the rows taken, those past their TTL are
	// dead-lettered to $5 or dropped, and those whose delivery count reached
	// the maximum are dead-lettered; neither applies in a dead-letter queue
	// ($4). The rest get a fresh lock token and count one more delivery.
	//
	// One row always comes back: the numbers of rows dead-lettered for their
	// TTL and for their delivery count, and of expired rows dropped; whether
	// more than $3 rows were available (as seen before this claim, so rows
	// other claimers hold count too); the microseconds until the earliest row
	// of the path becomes available, the rows this claim locks at their new
	// lock expiry (NULL when the path is empty); then the
	// columns of a claimed message, all NULL when none was claimed.
	qClaim = `
WITH o AS (
    SELECT lock_duration, max_delivery_count, dead_letter_on_expiration
      FROM bus_receivables WHERE path = $2
), c AS (
    SELECT m.seq, m.delivery_count, NOT $4 AND m.expires_at <= now() AS expired
      FROM bus_messages m
     WHERE m.path = $1 AND m.available_at <= now()
     ORDER BY m.available_at, m.seq
     LIMIT $3
       FOR UPDATE SKIP LOCKED
), v AS (
    SELECT c.seq, o.lock_duration, o.max_delivery_count,
           CASE WHEN c.expired AND o.dead_letter_on_expiration THEN 'ttl'
                WHEN c.expired THEN 'drop'
                WHEN NOT $4 AND c.delivery_count >= o.max_delivery_count THEN 'max'
                ELSE 'lock' END AS verdict
      FROM c, o
), dropped AS (
    DELETE FROM bus_messages m USING v
     WHERE m.seq = v.seq AND v.verdict = 'drop'
    RETURNING m.seq
), dead AS (
    UPDATE bus_messages m
       SET path = $5, available_at = now(), lock_token = NULL,
           dead_letter_reason = CASE v.verdict WHEN 'ttl' THEN 'TTLExpiredException'
                                               ELSE 'MaxDeliveryCountExceeded' END,
           dead_letter_description = CASE v.verdict
               WHEN 'ttl' THEN 'The message expired and was dead lettered.'
               ELSE 'Message could not be consumed after ' || v.max_delivery_count || ' delivery attempts.' END
      FROM v
     WHERE m.seq = v.seq AND v.verdict IN ('ttl', 'max')
    RETURNING m.seq, v.verdict
), locked AS (
    UPDATE bus_messages m
       SET available_at = now() + v.lock_duration,
           lock_token = gen_random_uuid(),
           delivery_count = m.delivery_count + 1
      FROM v
     WHERE m.seq = v.seq AND v.verdict = 'lock'
    RETURNING m.*
)
SELECT (SELECT count(*) FROM dead WHERE verdict = 'ttl'),
       (SELECT count(*) FROM dead WHERE verdict = 'max'),
       (SELECT count(*) FROM dropped),
       (SELECT count(*) FROM (SELECT FROM bus_messages WHERE path = $1 AND available_at <= now()
                               LIMIT $3 + 1) AS a) > $3,
       (extract(epoch FROM (SELECT min(t) FROM (
            SELECT min(available_at) FROM bus_messages WHERE path = $1 AND seq NOT IN (SELECT seq FROM c)
            UNION ALL SELECT min(available_at) FROM locked) AS n(t)) - now()) * 1000000)::bigint,
       l.seq, l.message_id, l.body, l.content_type, l.properties, l.key, l.correlation_id,
       l.subject, l.delivery_count, l.enqueued_at, l.available_at, l.lock_token::text,
       l.expires_at, l.dead_letter_reason, l.dead_letter_description
  FROM (SELECT) AS meta
  LEFT JOIN locked l ON true
 ORDER BY l.seq`

	// qClaimable returns the paths of $1 that have a message to claim now.
	qClaimable = `
SELECT p FROM unnest($1::text[]) AS p
 WHERE EXISTS (SELECT FROM bus_messages m WHERE m.path = p AND m.available_at <= now())`

	// Settlement matches the delivery (sequence number, lock token, path) and
	// requires the lock not to have expired, even if nobody claimed it since.
	// Completions from concurrent callers are deleted together; the sequence
	// numbers returned are the ones that held their lock.
	qComplete = `
DELETE FROM bus_messages m
 USING unnest($1::bigint[], $2::text[], $3::text[]) AS x(seq, lock_token, path)
 WHERE m.seq = x.seq AND m.lock_token = x.lock_token::uuid AND m.path = x.path
   AND m.available_at > now()
RETURNING m.seq`

	// qAbandon releases the lock. The message keeps its place in the queue
	// (available_at goes back to its enqueue time, less its priority's head
	// start, $7 µs per level), unless it has used up its
	// deliveries: then it goes to the dead-letter queue $4 now rather than at
	// the next claim. $5: the path is a dead-letter queue; $6: the options path.
	qAbandon = `
WITH t AS (
    SELECT m.seq, o.max_delivery_count,
           NOT $5 AND m.delivery_count >= o.max_delivery_count AS exhausted
      FROM bus_messages m, bus_receivables o
     WHERE m.seq = $1 AND m.lock_token = $2::uuid AND m.path = $3
       AND m.available_at > now() AND o.path = $6
)
UPDATE bus_messages m
   SET lock_token = NULL,
       path = CASE WHEN t.exhausted THEN $4 ELSE m.path END,
       available_at = CASE WHEN t.exhausted THEN now()
                           ELSE m.enqueued_at - m.priority * $7::bigint * interval '1 microsecond' END,
       dead_letter_reason = CASE WHEN t.exhausted THEN 'MaxDeliveryCountExceeded'
                                 ELSE m.dead_letter_reason END,
       dead_letter_description = CASE WHEN t.exhausted
           THEN 'Message could not be consumed after ' || t.max_delivery_count || ' delivery attempts.'
           ELSE m.dead_letter_description END
  FROM t
 WHERE m.seq = t.seq AND m.lock_token = $2::uuid AND m.available_at > now()
RETURNING m.path`

	qDeadLetter = `
UPDATE bus_messages
   SET path = $4, available_at = now(), lock_token = NULL,
       dead_letter_reason = $5, dead_letter_description = $6
 WHERE seq = $1 AND lock_token = $2::uuid AND path = $3 AND available_at > now()`

	// $4: the options path (queue or subscription).
	qRenewLock = `
UPDATE bus_messages m
   SET available_at = now() + o.lock_duration
  FROM bus_receivables o
 WHERE m.seq = $1 AND m.lock_token = $2::uuid AND m.path = $3
   AND m.available_at > now() AND o.path = $4
RETURNING m.available_at`

	// qNotify runs after the write has committed, in its own transaction: a
	// NOTIFY inside the write transaction would hold PostgreSQL's global notify
	// lock through the WAL flush and serialise all senders. A notification need
	// not be durable, so this commit does not wait for the flush either.
	qNotify = `
SELECT pg_notify(channel, $2)
  FROM set_config('synchronous_commit', 'off', true), unnest($1::text[]) AS channel`

	// qDepth counts the messages of every queue, subscription and their
	// dead-letter queues, active (enqueued, locked or not) and scheduled, and
	// the age in seconds of the oldest active one.
	qDepth = `
WITH paths AS (
    SELECT path FROM bus_receivables
    UNION ALL
    SELECT path || '/$deadletterqueue' FROM bus_receivables
)
SELECT p.path,
       count(m.seq) FILTER (WHERE m.enqueued_at <= now()),
       count(m.seq) FILTER (WHERE m.enqueued_at > now()),
       coalesce(extract(epoch FROM now() - min(m.enqueued_at) FILTER (WHERE m.enqueued_at <= now())), 0)::float8
  FROM paths p
  LEFT JOIN bus_messages m ON m.path = p.path
 GROUP BY p.path`

	qPurgeDuplicates = `
WITH d AS (
    SELECT entity, message_id FROM bus_duplicates
     WHERE expires_at <= now()
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
DELETE FROM bus_duplicates x USING d
 WHERE x.entity = d.entity AND x.message_id = d.message_id AND x.expires_at <= now()`
)

// Channel names are "bus_" and hex (see channelName): safe to quote as
// identifiers. LISTEN takes no parameters.
func qListen(channel string) string   { return `LISTEN "` + channel + `"` }
func qUnlisten(channel string) string { return `UNLISTEN "` + channel + `"` }
