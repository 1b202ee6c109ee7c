// Package runbook is the runbook language of Lucius (seed 003) and its store.
//
// A runbook is a versioned YAML document that says what to do, and when, for
// every member of a batch: a mailbox, a device, a user. Member data (a key, the
// batch's start time, and text columns) is loaded into a per-version table; the
// scheduler turns it into batches and phases, and the orchestrator runs each
// step as a Lucius job on the worker pool named by worker_id.
//
//	name: contoso-mailbox-migration        # ^[a-z][a-z0-9-]{0,62}$
//	version: 3                             # >= 1; a stored version never changes
//	description: Move mailboxes to Exchange Online.
//	data_source:
//	  columns: [display_name, email, target_database]   # each ^[a-z][a-z0-9_]{0,62}$
//	overdue_behavior: rerun                # rerun (default) | ignore
//	rerun_init: false                      # re-run init for live batches when this version takes over
//	init:                                  # once per batch, in order, before any phase
//	  - name: create-endpoint
//	    worker_id: exchange                # the worker pool (a Lucius service name)
//	    function: create_migration_endpoint  # the handler the worker runs
//	    params: {batch: "{{ _batch_id }}", starts: "{{ _batch_start_time }}"}
//	phases:                                # at least one
//	  - name: pre-notification
//	    offset_minutes: 7200               # minutes BEFORE the batch start (seed 003): due = start − offset
//	    steps:
//	      - name: send-notice              # step names are unique in the whole runbook
//	        worker_id: mailer
//	        function: send_email
//	        params: {to: "{{ email }}", subject: "Your move on {{ _batch_start_time }}"}
//	  - name: migrate
//	    offset_minutes: 0                  # at the start; negative offsets fall after it
//	    steps:
//	      - name: start-mailbox-move
//	        worker_id: exchange
//	        function: start_mailbox_move
//	        params: {mailbox: "{{ email }}", target: "{{ target_database }}"}
//	        is_poll_step: true             # the worker may answer "still in progress"
//	        poll_interval_sec: 60          # required with is_poll_step, >= 1
//	        poll_timeout_sec: 86400        # required with is_poll_step, >= poll_interval_sec
//	        on_failure: undo-move          # a rollback (phase steps only)
//	        timeout_seconds: 600           # optional: the lease of one dispatch
//	rollbacks:
//	  undo-move:
//	    - {name: cancel-move, worker_id: exchange, function: cancel_mailbox_move, params: {mailbox: "{{ email }}"}}
//	on_member_removed:
//	  - {name: notify-removed, worker_id: mailer, function: send_email, params: {to: "{{ email }}", subject: removed}}
//
// # Templates
//
// Any string in params, at any depth of maps and lists, may contain
// {{ variable }}: a data column, _member_key, _batch_time, _batch_id or
// _batch_start_time. Init steps run once per batch and may use only _batch_id
// and _batch_start_time. Everything renders as text (member data is text;
// times are RFC 3339 in UTC, 2025-03-15T00:00:00Z); a number, boolean or null
// literal stays as it is. See MemberVars, BatchVars and Params.Render.
//
// The {{ }} syntax is the one workflow templates use (package braces reads
// both), but the expressions differ: a workflow reference is a typed path
// into JSON inputs and outputs, rendering missing values as null; a runbook
// variable is a bare name whose value is text, and a missing one fails the
// render rather than send a step to the wrong place. A "}}" outside {{ }}
// is refused anywhere (braces.Strict).
//
// # Validation
//
// Parse checks everything it can before a runbook is stored: unknown keys,
// types, names, unique phase and step names, poll settings, on_failure naming
// a rollback, and every template variable. Like the workflow language
// (package workflow) it reports all problems at once, each as
// "file:line:column: message".
//
// # Store
//
// Store.Apply keeps each (name, version) once (same YAML again changes nothing;
// other YAML under a stored version is ErrVersionExists), creates the version's
// member table runbook_{name}_v{version} (see DataTableName) with the system
// columns _row_id, _member_key, _batch_time, _first_seen_at, _last_seen_at,
// _is_current and one text column per data column, and makes the version the
// active one of its name. Store.LoadMembers upserts member rows (ReadCSV reads
// them from a file). The execution tables (batches, batch_members,
// phase_executions, step_executions, init_executions) are created by
// Migrations; the scheduler and the orchestrator write them.
//
// Table and column names come from input, so each is validated against a
// strict pattern and quoted; values are always query parameters.
package runbook
