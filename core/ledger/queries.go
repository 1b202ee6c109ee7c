package ledger

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Column lists shared by every query that scans the same struct.
const (
	jobColumns = `job_id, tenant_id, request_type, workflow_id, workflow_version, status,
	resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason,
	input_ref, output_ref, doc_id, correlation_id, callback_url, payload,
	owner_id, owner_epoch, owner_heartbeat_at, current_step_id, reason, result_ref,
	cancel_requested_at, replay_of, deadline_at, created_at, updated_at, completed_at, notify,
	(SELECT r.received_at FROM requests r WHERE r.job_id = jobs.job_id) AS received_at,
	'' AS submitted_by, '' AS asset_id, 0 AS asset_revision, priority` // the orchestrator's copy needs none of these three; jobView reads them

	stepColumns = `job_id, step_id, node_id, kind, parent_step_id, child_index, step_index, step_type, service,
	status, attempt_no, coalesce(lease_id::text, ''), max_attempts, ack_timeout_ms, params, output, artifacts,
	failure_class, reason, expanded, children_total, children_pending, children_running, children_succeeded,
	children_failed, created_at, updated_at, started_at, completed_at, retry_base`

	attemptColumns = `job_id, step_id, attempt_no, lease_id::text, status,
	resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason,
	worker_id, failure_class, reason, created_at, ack_deadline, acked_at, lease_expires_at,
	last_heartbeat_at, progress, completed_at`

	eventColumns = `event_id, job_id, step_id, attempt_no, type, from_status, to_status, reason, data, created_at`

	outboxColumns = `id, message_id, destination, kind, job_id, step_id, attempt_no, body, content_type,
	properties, message_key, correlation_id, subject, scheduled_at, created_at, attempts, priority`

	// jobView reads a job whether or not an orchestrator has created it: an
	// accepted request shows RECEIVED until its job-request message is published,
	// then QUEUED, or CANCELLING once a cancel was asked for.
	jobView = `SELECT r.job_id, r.tenant_id, r.request_type,
	coalesce(j.workflow_id, r.request_type) AS workflow_id, coalesce(j.workflow_version, r.workflow_version) AS workflow_version,
	CASE WHEN j.job_id IS NOT NULL THEN j.status
	     WHEN r.cancel_requested_at IS NOT NULL THEN 'CANCELLING'
	     WHEN EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = r.job_id AND o.kind = 'job-request' AND o.sent_at IS NULL) THEN 'RECEIVED'
	     ELSE 'QUEUED' END AS status,
	r.resolved_mode, r.partition, r.routing_key_used, r.topic, r.decision_source, r.decision_reason,
	r.input_ref, r.output_ref, r.doc_id, r.correlation_id, r.callback_url,
	coalesce(j.payload, r.command -> 'payload', '{}'::jsonb) AS payload,
	coalesce(j.owner_id, '') AS owner_id, coalesce(j.owner_epoch, 0) AS owner_epoch, j.owner_heartbeat_at,
	coalesce(j.current_step_id, '') AS current_step_id,
	coalesce(j.reason, r.cancel_reason) AS reason, coalesce(j.result_ref, '') AS result_ref,
	coalesce(j.cancel_requested_at, r.cancel_requested_at) AS cancel_requested_at,
	r.replay_of, j.deadline_at,
	r.received_at AS created_at, coalesce(j.updated_at, r.received_at) AS updated_at, j.completed_at, r.notify,
	r.received_at, r.submitted_by, coalesce(ar.asset_id, '') AS asset_id, coalesce(ar.revision, 0) AS asset_revision,
	coalesce(j.priority, (r.command ->> 'priority')::int, 0) AS priority
	FROM requests r LEFT JOIN jobs j ON j.job_id = r.job_id LEFT JOIN asset_revisions ar ON ar.job_id = r.job_id`
)

const (
	sqlInsertRequest = `INSERT INTO requests (job_id, tenant_id, idempotency_key, request_hash, request_type,
	workflow_version, input_ref, output_ref, doc_id, correlation_id, callback_url, command,
	resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason, replay_of, notify, submitted_by,
	request_key)
	VALUES ($1, $2, nullif($3, ''), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21,
	coalesce(nullif($22, ''), $1))
	ON CONFLICT (request_key) DO NOTHING
	RETURNING received_at`

	sqlRequestByKey = `SELECT job_id, request_hash FROM requests WHERE request_key = $1`

	sqlLockRequest = `SELECT job_id, tenant_id, coalesce(idempotency_key, ''), request_hash, request_type,
	workflow_version, input_ref, output_ref, doc_id, correlation_id, callback_url, command,
	resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason,
	cancel_requested_at, received_at, replay_of, notify
	FROM requests WHERE job_id = $1 FOR UPDATE`

	sqlCancelRequest = `UPDATE requests SET cancel_requested_at = coalesce(cancel_requested_at, now()),
	cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN $2 ELSE cancel_reason END
	WHERE job_id = $1`

	sqlLockJob = `SELECT ` + jobColumns + ` FROM jobs WHERE job_id = $1 FOR UPDATE`

	// sqlInsertJob creates the job and marks its request claimed (what the
	// stranded-request sweeper looks for is a request never claimed).
	sqlInsertJob = `WITH ins AS (INSERT INTO jobs (job_id, tenant_id, request_type, workflow_id, workflow_version, status,
	resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason,
	input_ref, output_ref, doc_id, correlation_id, callback_url, payload,
	owner_id, owner_epoch, owner_heartbeat_at, current_step_id, reason, cancel_requested_at, completed_at,
	replay_of, deadline_at, notify, priority)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, now(), $21, $22, $23, $24,
	$25, $26, $27, $28)
	ON CONFLICT (job_id) DO NOTHING
	RETURNING job_id)
	UPDATE requests r SET claimed_at = now() FROM ins WHERE r.job_id = ins.job_id`

	sqlUpdateJob = `UPDATE jobs SET status = $2, current_step_id = $3, reason = $4, result_ref = $5,
	cancel_requested_at = $6, completed_at = $7, updated_at = now()
	WHERE job_id = $1`

	// sqlNodeSteps reads a job's workflow nodes, not the fan-out children.
	sqlNodeSteps = `SELECT ` + stepColumns + ` FROM steps WHERE job_id = $1 AND parent_step_id = ''
	ORDER BY step_index, step_id`

	sqlStep = `SELECT ` + stepColumns + ` FROM steps WHERE job_id = $1 AND step_id = $2`

	// sqlListSteps pages a job's steps in definition order, each node's
	// children after it; kinds filters (empty: all).
	sqlListSteps = `SELECT ` + stepColumns + ` FROM steps
	WHERE job_id = $1 AND (cardinality($2::text[]) = 0 OR kind = ANY($2))
	  AND (step_index, child_index, step_id) > ($3, $4, $5)
	ORDER BY step_index, child_index, step_id
	LIMIT $6`

	sqlPendingChildren = `SELECT ` + stepColumns + ` FROM steps
	WHERE job_id = $1 AND parent_step_id = $2 AND status = 'PENDING'
	ORDER BY child_index LIMIT $3`

	sqlChildResults = `SELECT output, artifacts FROM steps
	WHERE job_id = $1 AND parent_step_id = $2 ORDER BY child_index`

	sqlOutboxIDs = `SELECT message_id FROM outbox WHERE message_id = ANY($1)`

	// sqlCancelPending closes every step of a job that never started.
	sqlCancelPending = `UPDATE steps SET status = 'CANCELLED', reason = $2, completed_at = now(), updated_at = now(),
	children_pending = 0
	WHERE job_id = $1 AND status IN ('PENDING', 'READY')
	RETURNING step_id, parent_step_id`

	sqlUpdateStep = `UPDATE steps SET status = $3, attempt_no = $4, lease_id = $5, params = $6, output = $7,
	artifacts = $8, failure_class = $9, reason = $10, expanded = $11, children_total = $12,
	children_pending = $13, children_running = $14, children_succeeded = $15, children_failed = $16,
	started_at = $17, completed_at = $18, retry_base = $19, updated_at = now()
	WHERE job_id = $1 AND step_id = $2`

	sqlAttempt = `SELECT ` + attemptColumns + ` FROM attempts WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3`

	sqlAttemptsOfSteps = `SELECT ` + attemptColumns + ` FROM attempts WHERE job_id = $1 AND step_id = ANY($2)
	ORDER BY step_id, attempt_no`

	sqlInsertAttempt = `INSERT INTO attempts (job_id, step_id, attempt_no, lease_id, status,
	resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason, ack_deadline)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

	sqlDetachDirective = `UPDATE attempts SET directive = $4 WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3`

	sqlDetachedDirective = `SELECT lease_id, directive FROM attempts WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3`

	sqlUpdateAttempt = `UPDATE attempts SET status = $4, worker_id = $5, failure_class = $6, reason = $7,
	acked_at = $8, lease_expires_at = $9, completed_at = $10, last_heartbeat_at = $11, progress = $12
	WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3`

	sqlGetJob = jobView + ` WHERE r.job_id = $1`

	// sqlListJobs pages newest first with a (received_at, job_id) keyset. The
	// status filter applies to the derived status, hence the subquery.
	sqlListJobs = `SELECT * FROM (` + jobView + `
	WHERE ($1 = '' OR r.tenant_id = $1)
	  AND (NOT $6::bool OR r.tenant_id = ANY($7::text[]))
	  AND ($2::timestamptz IS NULL OR (r.received_at, r.job_id) < ($2, $3))
	  AND ($9::timestamptz IS NULL OR r.received_at >= $9)
	  AND ($10::timestamptz IS NULL OR r.received_at < $10)) v
	WHERE (cardinality($4::text[]) = 0 OR v.status = ANY($4))
	  AND ($8 = '' OR v.workflow_id = $8)
	ORDER BY v.created_at DESC, v.job_id DESC
	LIMIT $5`

	sqlListEvents = `SELECT ` + eventColumns + ` FROM job_events WHERE job_id = $1 AND event_id > $2
	ORDER BY event_id LIMIT $3`

	// sqlReclaim takes over live jobs whose owner stopped heartbeating. The
	// epoch increment fences the former owner; SKIP LOCKED lets several
	// orchestrators scan at once without contending.
	sqlReclaim = `WITH c AS (
		SELECT job_id, owner_id AS previous_owner FROM jobs
		WHERE completed_at IS NULL AND owner_heartbeat_at < now() - make_interval(secs => $2)
		ORDER BY owner_heartbeat_at
		LIMIT $3
		FOR UPDATE SKIP LOCKED)
	UPDATE jobs j SET owner_id = $1, owner_epoch = j.owner_epoch + 1, owner_heartbeat_at = now(), updated_at = now()
	FROM c WHERE j.job_id = c.job_id
	RETURNING j.job_id, c.previous_owner, j.owner_epoch`

	// sqlCountOrphans counts what sqlReclaim would take: live jobs whose
	// owner has not heartbeated for $1 seconds (jobs_heartbeat_live).
	sqlCountOrphans = `SELECT count(*) FROM jobs
		WHERE completed_at IS NULL AND owner_heartbeat_at < now() - make_interval(secs => $1)`

	// sqlClaimOutbox leases the rows: for $4 seconds other claimers skip them.
	sqlClaimOutbox = outboxClaimed + `
	UPDATE outbox o SET available_at = now() + make_interval(secs => $4), attempts = o.attempts + 1
	FROM c WHERE o.id = c.claimed
	RETURNING ` + outboxColumns

	// sqlClaimOutboxSent marks the rows sent in the claiming transaction,
	// whose locks hide them from other claimers until it ends.
	sqlClaimOutboxSent = outboxClaimed + `
	UPDATE outbox o SET sent_at = now(), last_error = '', attempts = o.attempts + 1
	FROM c WHERE o.id = c.claimed
	RETURNING ` + outboxColumns

	// outboxClaimed locks up to $1 unsent rows, of the kinds in $2 (when $3)
	// or all but them (when not $3).
	outboxClaimed = `WITH c AS (
		SELECT id AS claimed FROM outbox
		WHERE sent_at IS NULL AND dead_at IS NULL AND available_at <= now()
		  AND (kind = ANY($2)) = $3
		ORDER BY available_at, id
		LIMIT $1
		FOR UPDATE SKIP LOCKED)`

	// Buffered events and outbox messages, one array per column, inserted in
	// the order they were buffered (event ids follow it).
	sqlInsertEvents = `INSERT INTO job_events (job_id, step_id, attempt_no, type, from_status, to_status, reason, data)
	SELECT job_id, step_id, attempt_no, type, from_status, to_status, reason, data::jsonb
	FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
		WITH ORDINALITY AS u(job_id, step_id, attempt_no, type, from_status, to_status, reason, data, n)
	ORDER BY n`

	sqlInsertOutbox = `INSERT INTO outbox (message_id, destination, kind, job_id, step_id, attempt_no, body, content_type,
		properties, message_key, correlation_id, subject, scheduled_at, priority, available_at)
	SELECT message_id, destination, kind, job_id, step_id, attempt_no, body, content_type,
		properties::jsonb, message_key, correlation_id, subject, scheduled_at, priority,
		now() - priority * $15::bigint * interval '1 microsecond'
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::bytea[], $8::text[],
		$9::text[], $10::text[], $11::text[], $12::text[], $13::timestamptz[], $14::smallint[])
		WITH ORDINALITY AS u(message_id, destination, kind, job_id, step_id, attempt_no, body, content_type,
			properties, message_key, correlation_id, subject, scheduled_at, priority, n)
	ORDER BY n`

	sqlMarkSent = `UPDATE outbox SET sent_at = now(), last_error = ''
	WHERE id = ANY($1) AND sent_at IS NULL
	RETURNING kind, job_id, step_id, attempt_no`

	// sqlStepsPublished moves steps whose directive reached the bus from
	// DISPATCHING to AWAITING_ACK, unless a callback already moved them on.
	// Rows are locked in key order so concurrent writers cannot deadlock.
	sqlStepsPublished = `WITH sent AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::int[]) AS u(job_id, step_id, attempt_no)),
	target AS (
		SELECT s.job_id, s.step_id, s.attempt_no FROM steps s JOIN sent USING (job_id, step_id, attempt_no)
		WHERE s.status = 'DISPATCHING'
		ORDER BY s.job_id, s.step_id
		FOR UPDATE OF s),
	moved AS (
		UPDATE steps s SET status = 'AWAITING_ACK', updated_at = now()
		FROM target t WHERE s.job_id = t.job_id AND s.step_id = t.step_id
		RETURNING s.job_id, s.step_id, s.attempt_no)
	UPDATE attempts a SET status = 'AWAITING_ACK'
	FROM moved m WHERE a.job_id = m.job_id AND a.step_id = m.step_id AND a.attempt_no = m.attempt_no
	RETURNING a.job_id, a.step_id, a.attempt_no`

	sqlReleaseOutbox = `UPDATE outbox SET available_at = now() + make_interval(secs => $3), last_error = $2
	WHERE id = $1 AND sent_at IS NULL`

	sqlAbandonOutbox = `UPDATE outbox SET dead_at = now(), last_error = $2 WHERE id = $1 AND sent_at IS NULL`

	sqlPurgeSent = `DELETE FROM outbox WHERE id IN (
		SELECT id FROM outbox WHERE sent_at < now() - make_interval(secs => $1) LIMIT $2)`

	sqlPutDefinition = `INSERT INTO workflow_definitions (workflow_id, version, source, source_sha256, registered_by)
	VALUES ($1, $2, $3, $4, $5) ON CONFLICT (workflow_id, version) DO NOTHING`

	sqlDefinitionHash = `SELECT source_sha256 FROM workflow_definitions WHERE workflow_id = $1 AND version = $2`

	sqlGetDefinition = `SELECT workflow_id, version, source, source_sha256, registered_at, registered_by FROM workflow_definitions
	WHERE workflow_id = $1 AND ($2 = 0 OR version = $2) ORDER BY version DESC LIMIT 1`

	sqlListDefinitions = `SELECT DISTINCT ON (workflow_id) workflow_id, version, source, source_sha256, registered_at, registered_by
	FROM workflow_definitions WHERE workflow_id > $1 ORDER BY workflow_id, version DESC LIMIT $2`

	sqlListVersions = `SELECT workflow_id, version, source, source_sha256, registered_at, registered_by FROM workflow_definitions
	WHERE workflow_id = $1 ORDER BY version DESC`

	sqlPutHandler = `INSERT INTO handlers (name, service, description) VALUES ($1, $2, $3)
	ON CONFLICT (name) DO UPDATE SET description = excluded.description, updated_at = now()
	WHERE handlers.service = excluded.service
	RETURNING service`

	sqlHandlers = `SELECT name, service, description FROM handlers ORDER BY name`

	sqlInsertDeadLetter = `INSERT INTO dead_letters (kind, job_id, step_id, attempt_no, reason, description,
	entity, message_id, body, properties) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	ON CONFLICT DO NOTHING`

	sqlListDeadLetters = `SELECT id, kind, job_id, step_id, attempt_no, reason, description, entity, message_id,
	body, properties, created_at, replay_job_id FROM dead_letters
	WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR job_id = $2) AND ($3 = 0 OR id < $3)
	  AND (NOT $5::bool OR job_id IN (SELECT job_id FROM requests WHERE tenant_id = ANY($6::text[])))
	ORDER BY id DESC LIMIT $4`

	// sqlPendingDeadLetters counts the dead letters not replayed, by kind
	// (index dead_letters_pending).
	sqlPendingDeadLetters = `SELECT kind, count(*) FROM dead_letters WHERE replay_job_id = '' GROUP BY kind`

	sqlMarkReplayed = `UPDATE dead_letters SET replay_job_id = $2 WHERE job_id = $1 AND kind = 'step' AND replay_job_id = ''`

	sqlReplays = `SELECT job_id FROM requests WHERE replay_of = $1 ORDER BY received_at, job_id`

	// sqlCancelWaiting closes the steps of a job that wait for a retry, the
	// next poll or a circuit breaker (READY), and forgets their holds.
	sqlCancelWaiting = `WITH w AS (
		SELECT step_id, status FROM steps WHERE job_id = $1 AND status IN ('FAILED_RETRY', 'POLLING', 'READY') FOR UPDATE),
	h AS (
		DELETE FROM step_holds h USING w WHERE h.job_id = $1 AND h.step_id = w.step_id),
	s AS (
		UPDATE steps SET status = 'CANCELLED', reason = $2, completed_at = now(), updated_at = now()
		FROM w WHERE steps.job_id = $1 AND steps.step_id = w.step_id
		RETURNING steps.step_id, steps.parent_step_id, steps.attempt_no, w.status AS was),
	a AS (
		UPDATE attempts a SET status = 'CANCELLED', completed_at = now()
		FROM s WHERE a.job_id = $1 AND a.step_id = s.step_id AND a.attempt_no = s.attempt_no AND a.completed_at IS NULL)
	SELECT step_id, parent_step_id, attempt_no, was FROM s`

	sqlAllSteps = `SELECT ` + stepColumns + ` FROM steps WHERE job_id = $1 ORDER BY step_index, child_index, step_id`

	sqlPendingOutbox = `SELECT EXISTS (SELECT 1 FROM outbox WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3
	AND kind = 'directive' AND sent_at IS NULL AND dead_at IS NULL)`

	sqlCountDirectives = `SELECT count(*) FROM outbox WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND kind = 'directive'`

	// Sweeper scans: candidates only; every action re-checks under the job's lock.
	sqlSchedulePoll = `INSERT INTO step_polls (job_id, step_id, started_at, next_poll_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (job_id, step_id) DO UPDATE SET next_poll_at = excluded.next_poll_at`

	sqlPollDispatched = `UPDATE step_polls SET next_poll_at = NULL WHERE job_id = $1 AND step_id = $2`

	sqlEndPoll = `DELETE FROM step_polls WHERE job_id = $1 AND step_id = $2`

	sqlPollStarted = `SELECT started_at FROM step_polls WHERE job_id = $1 AND step_id = $2`

	sqlDuePolls = `SELECT s.job_id, s.step_id, s.attempt_no, s.lease_id::text FROM step_polls p
	JOIN steps s ON s.job_id = p.job_id AND s.step_id = p.step_id
	WHERE p.next_poll_at <= now() AND s.status = 'POLLING'
	ORDER BY p.next_poll_at LIMIT $1`

	sqlDueAcks = `SELECT a.job_id, a.step_id, a.attempt_no, a.lease_id::text FROM attempts a
	JOIN steps s ON s.job_id = a.job_id AND s.step_id = a.step_id AND s.attempt_no = a.attempt_no
	WHERE a.acked_at IS NULL AND a.completed_at IS NULL AND a.ack_deadline < now()
	  AND s.status IN ('DISPATCHING', 'AWAITING_ACK', 'FAILED_RETRY')
	ORDER BY a.ack_deadline LIMIT $1`

	sqlDueLeases = `SELECT a.job_id, a.step_id, a.attempt_no, a.lease_id::text FROM attempts a
	JOIN steps s ON s.job_id = a.job_id AND s.step_id = a.step_id AND s.attempt_no = a.attempt_no
	WHERE a.acked_at IS NOT NULL AND a.completed_at IS NULL AND a.lease_expires_at < now()
	  AND s.status = 'IN_PROGRESS'
	ORDER BY a.lease_expires_at LIMIT $1`

	sqlStuckDispatching = `SELECT a.job_id, a.step_id, a.attempt_no, a.lease_id::text FROM attempts a
	JOIN steps s ON s.job_id = a.job_id AND s.step_id = a.step_id AND s.attempt_no = a.attempt_no
	WHERE a.acked_at IS NULL AND a.completed_at IS NULL AND s.status = 'DISPATCHING'
	  AND a.created_at < now() - make_interval(secs => $2)
	  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = a.job_id AND o.step_id = a.step_id
	                  AND o.attempt_no = a.attempt_no AND o.kind = 'directive' AND o.sent_at IS NULL AND o.dead_at IS NULL)
	ORDER BY a.created_at LIMIT $1`

	sqlDueSLAs = `SELECT job_id FROM jobs WHERE completed_at IS NULL AND deadline_at < now()
	ORDER BY deadline_at LIMIT $1`

	// sqlStaleOutbox reports each message unsent for too long once; one that
	// failed to publish and waits out its backoff is made available at once,
	// to be retried right after the sweeper repaired its destination.
	// Completion callbacks keep their own retry schedule.
	sqlStaleOutbox = `WITH c AS (
		SELECT id FROM outbox
		WHERE sent_at IS NULL AND dead_at IS NULL AND stale_at IS NULL AND kind <> 'completion-callback'
		  AND created_at < now() - make_interval(secs => $2)
		ORDER BY id LIMIT $1
		FOR UPDATE SKIP LOCKED)
	UPDATE outbox o SET stale_at = now(),
		available_at = CASE WHEN o.last_error <> '' THEN least(o.available_at, now()) ELSE o.available_at END
	FROM c WHERE o.id = c.id
	RETURNING o.id, o.kind, o.destination, o.job_id, o.step_id, o.attempt_no, o.attempts, o.last_error`

	// sqlStrandedRequests finds accepted requests no orchestrator claimed
	// although their orchestrator-jobs message left the outbox long ago (it
	// was dead-lettered, or lost with a restored bus).
	sqlStrandedRequests = `SELECT r.job_id FROM requests r
	WHERE r.claimed_at IS NULL AND r.received_at < now() - make_interval(secs => $2)
	  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = r.job_id AND o.kind = 'job-request'
	                  AND o.sent_at IS NULL AND o.dead_at IS NULL)
	  AND (SELECT count(*) FROM job_events e WHERE e.job_id = r.job_id AND e.type = 'JOB_REQUEST_REQUEUED') < $3
	ORDER BY r.received_at LIMIT $1`

	sqlCountEvents = `SELECT count(*) FROM job_events WHERE job_id = $1 AND type = $2`

	// sqlHasAttemptEvent finds an attempt's event of a type whose data holds
	// the given fields (the job's events, through job_events_job).
	sqlHasAttemptEvent = `SELECT EXISTS (SELECT FROM job_events
		WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND type = $4 AND data @> $5)`

	// sqlHeartbeatOwned refreshes the jobs an owner holds at the epochs it holds;
	// a job reclaimed since (a higher epoch) is not touched: the write is fenced.
	sqlHeartbeatOwned = `UPDATE jobs j SET owner_heartbeat_at = now()
	FROM unnest($2::text[], $3::bigint[]) AS u(job_id, epoch)
	WHERE j.job_id = u.job_id AND j.owner_id = $1 AND j.owner_epoch = u.epoch AND j.completed_at IS NULL
	RETURNING j.job_id`

	sqlOwnership = `SELECT job_id, owner_id, owner_epoch, completed_at IS NOT NULL FROM jobs WHERE job_id = ANY($1)`

	sqlOwnedJobs = `SELECT job_id, owner_epoch FROM jobs WHERE owner_id = $1 AND completed_at IS NULL`

	sqlOutboxBacklog = `SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
	FROM outbox WHERE sent_at IS NULL AND dead_at IS NULL`
)

func scanJob(row pgx.Row) (*Job, error) {
	var j Job
	var heartbeat, cancelAt, completedAt, received *time.Time
	var payload []byte
	var deadline *time.Time
	err := row.Scan(&j.JobID, &j.TenantID, &j.RequestType, &j.WorkflowID, &j.WorkflowVersion, &j.Status,
		&j.Routing.Mode, &j.Routing.Partition, &j.Routing.RoutingKey, &j.Routing.Topic, &j.Routing.DecisionSource,
		&j.Routing.DecisionReason, &j.InputRef, &j.OutputRef, &j.DocID, &j.CorrelationID, &j.CallbackURL, &payload,
		&j.OwnerID, &j.OwnerEpoch, &heartbeat, &j.CurrentStepID, &j.Reason, &j.ResultRef,
		&cancelAt, &j.ReplayOf, &deadline, &j.CreatedAt, &j.UpdatedAt, &completedAt, &j.Notify, &received, &j.SubmittedBy,
		&j.AssetID, &j.AssetRevision, &j.Priority)
	if err != nil {
		return nil, err
	}
	j.DeadlineAt, j.ReceivedAt = derefTime(deadline), derefTime(received)
	j.Payload = payload
	j.OwnerHeartbeatAt, j.CancelRequestedAt, j.CompletedAt = derefTime(heartbeat), derefTime(cancelAt), derefTime(completedAt)
	return &j, nil
}

func scanStep(row pgx.Row) (Step, error) {
	var s Step
	var ackMS int64
	var params, output, artifacts []byte
	var started, completed *time.Time
	c := &s.Children
	err := row.Scan(&s.JobID, &s.StepID, &s.NodeID, &s.Kind, &s.Parent, &s.ChildNo, &s.Index, &s.Type, &s.Service,
		&s.Status, &s.AttemptNo, &s.LeaseID, &s.MaxAttempts, &ackMS, &params, &output, &artifacts,
		&s.FailureClass, &s.Reason, &s.Expanded, &c.Total, &c.Pending, &c.Running, &c.Succeeded, &c.Failed,
		&s.CreatedAt, &s.UpdatedAt, &started, &completed, &s.RetryBase)
	if err != nil {
		return s, err
	}
	s.AckTimeout = time.Duration(ackMS) * time.Millisecond
	s.Params, s.Output = params, output
	if err := json.Unmarshal(artifacts, &s.Artifacts); err != nil {
		return s, err
	}
	s.StartedAt, s.CompletedAt = derefTime(started), derefTime(completed)
	return s, nil
}

func scanAttempt(row pgx.Row) (*Attempt, error) {
	var a Attempt
	var deadline, acked, lease, beat, completed *time.Time
	err := row.Scan(&a.JobID, &a.StepID, &a.AttemptNo, &a.LeaseID, &a.Status,
		&a.Routing.Mode, &a.Routing.Partition, &a.Routing.RoutingKey, &a.Routing.Topic, &a.Routing.DecisionSource,
		&a.Routing.DecisionReason, &a.WorkerID, &a.FailureClass, &a.Reason, &a.CreatedAt, &deadline, &acked, &lease,
		&beat, &a.Progress, &completed)
	if err != nil {
		return nil, err
	}
	a.LastHeartbeatAt = derefTime(beat)
	a.AckDeadline, a.AckedAt, a.CompletedAt = derefTime(deadline), derefTime(acked), derefTime(completed)
	a.LeaseExpiresAt = derefTime(lease)
	return &a, nil
}

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	return e, scanEventInto(row, &e)
}

// scanEventInto scans eventColumns into e, then the row's extra columns.
func scanEventInto(row pgx.Row, e *Event, extra ...any) error {
	var data []byte
	dest := append([]any{&e.ID, &e.JobID, &e.StepID, &e.AttemptNo, &e.Type, &e.FromStatus, &e.ToStatus, &e.Reason,
		&data, &e.CreatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	if len(data) > 0 {
		return json.Unmarshal(data, &e.Data)
	}
	return nil
}

func scanOutbox(row pgx.Row) (OutboxMessage, error) {
	var m OutboxMessage
	var props []byte
	var scheduled *time.Time
	if err := row.Scan(&m.ID, &m.MessageID, &m.Destination, &m.Kind, &m.JobID, &m.StepID, &m.AttemptNo, &m.Body,
		&m.ContentType, &props, &m.Key, &m.CorrelationID, &m.Subject, &scheduled, &m.CreatedAt, &m.Attempts, &m.Priority); err != nil {
		return m, err
	}
	m.ScheduledAt = derefTime(scheduled)
	return m, json.Unmarshal(props, &m.Properties)
}
