// Package worker is the Lucius worker SDK: Handle registers a handler by
// name and Run does everything else. Below them, it is everything a team
// needs to run a step of a protocol (OCR, EMBEDDING, SIS, ...) except the work
// itself, which the team supplies as an Executor.
//
// A Runner receives directives (lucius.v1.Directive, protojson) from every
// directive subscription of its service and, for each one:
//
//  1. parses and validates it (an unusable message is dead-lettered with a reason);
//  2. claims the attempt in the idempotency Store under the key
//     (job_id, step_id, attempt_no, lease_id). An attempt that already finished
//     is not run again: its stored RESULT is sent again and the message completed;
//  3. sends ACK to the orchestrator's CallbackService. STALE_ATTEMPT,
//     LEASE_MISMATCH and AFTER_TERMINAL mean another attempt owns the step: the
//     message is completed without running anything;
//  4. runs the Executor while renewing the message lock, the executor writing its
//     artifacts under <workspace_ref><step_type>/<attempt_no>/ through the Task.
//     When the directive sets lease_timeout, it heartbeats every
//     HeartbeatInterval(lease_timeout), carrying the Task's progress
//     (Task.SetProgress); a heartbeat saying the lease is lost cancels the
//     execution (cause ErrLeaseLost), and the attempt ends without RESULT,
//     with nothing recorded as done and the message completed;
//  5. on the protocol's final step, copies the first artifact to output_ref
//     (a file, or an az:// blob: package blob serves every ref by scheme);
//     an output over Config.InlineOutputLimit is spilled to the step's
//     directory and the RESULT carries its ref (SpilledOutputKey);
//  6. on success, records the step's effect with its RESULT (Store.Finish): one record
//     per (job_id, step_id), so a step has exactly one committed effect
//     however many of its attempts succeed;
//  7. records the RESULT in the Store, then sends it, retried with capped,
//     jittered exponential backoff until the orchestrator answers;
//  8. completes the message. A message whose RESULT was not delivered is never
//     completed: it is abandoned (or its lock left to expire) and its
//     redelivery sends the stored RESULT.
//
// A long Executor saves its progress with Task.SaveCheckpoint and resumes
// from Task.Checkpoint: checkpoints live in the job's workspace per step, so
// a redelivered or retried attempt of the step reads them, and each save is
// a CHECKPOINT_SAVED event of the job. At shutdown Task.ShuttingDown is
// closed; within Config.ShutdownGrace the Executor may checkpoint and return
// ErrShuttingDown, and the runner releases the attempt for redelivery
// without RESULT.
//
// Config.Middleware wraps the Executor with behaviour every handler shares;
// fault injection for chaos tests is one, in test support
// (workertest/faults), not in the runtime.
//
// Errors returned by an Executor are classified with Permanent and Retryable
// into the RESULT's failure_class; an unclassified error is RETRYABLE (see
// Classify).
//
// A service that owns several handlers of a DAG workflow (the directive's
// step_type names the handler) serves them with one Handlers, an Executor
// that dispatches on step_type and fails an unknown handler permanently.
//
// A worker's own tests run its handlers through the contract kit
// (workertest.CheckContract): the real Runner on an in-memory bus.
package worker
