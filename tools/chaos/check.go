package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// injectedFault is the code a worker puts in the reason of a failure it was
// told to inject (worker.CodeInjectedFault).
const injectedFault = "INJECTED_FAULT"

var (
	terminalJob  = map[string]bool{statusSucceeded: true, statusFailedFinal: true, statusCancelled: true}
	terminalStep = map[string]bool{statusSucceeded: true, statusFailedFinal: true, statusCancelled: true, "SKIPPED": true, "ROLLED_BACK": true}
)

// check returns every problem the snapshot shows; none means the run passed.
func check(snap *snapshot, sh shape) []string {
	var out []string
	for _, j := range snap.jobs {
		for _, c := range []func(*jobRecord, shape) []string{checkTerminal, checkOutcome, checkEffects, checkTransitions} {
			out = append(out, c(j, sh)...)
		}
	}
	for _, e := range snap.orphanEffects {
		out = append(out, fmt.Sprintf("worker effect %s names no task step of its job", e))
	}
	if snap.requests != len(snap.jobs) {
		out = append(out, fmt.Sprintf("the ledger holds %d requests for %d accepted chaos jobs", snap.requests, len(snap.jobs)))
	}
	return out
}

// name identifies a job in a problem: its id, plan index and fault.
func (j *jobRecord) name() string {
	f := "no fault"
	if j.Fault != nil {
		f = "fault " + j.Fault.String()
	}
	return fmt.Sprintf("job %s (#%d, %s)", j.ID, j.Index, f)
}

// checkTerminal: every job ended.
func checkTerminal(j *jobRecord, _ shape) []string {
	if terminalJob[j.Status] {
		return nil
	}
	where := "no current step"
	if s := j.Steps[j.CurrentStep]; s != nil {
		where = fmt.Sprintf("current step %s %s at attempt %d", s.ID, s.Status, s.AttemptNo)
	}
	return []string{fmt.Sprintf("%s is not terminal: %s, %s", j.name(), j.Status, where)}
}

// checkOutcome: a job ends as its fault says, both ways: SUCCEEDED with every
// step done unless the fault dooms a step, and then FAILED_FINAL at that step
// (for a permanent fault, with the injected reason, not one the chaos caused).
func checkOutcome(j *jobRecord, sh shape) []string {
	if !terminalJob[j.Status] {
		return nil // checkTerminal reports it
	}
	want := sh.expected(j.Fault)
	if j.Status != want {
		return []string{fmt.Sprintf("%s ended %s, want %s%s", j.name(), j.Status, want, failedSteps(j))}
	}
	var out []string
	switch want {
	case statusSucceeded:
		for _, ts := range sh.steps {
			if s := j.Steps[ts.ID]; s == nil || s.Status != statusSucceeded {
				out = append(out, fmt.Sprintf("%s SUCCEEDED but its step %s is %s", j.name(), ts.ID, stepStatus(s)))
			}
		}
	case statusFailedFinal:
		s := j.Steps[j.Fault.Step]
		switch {
		case s == nil || s.Status != statusFailedFinal:
			out = append(out, fmt.Sprintf("%s FAILED_FINAL but its faulted step %s is %s%s", j.name(), j.Fault.Step, stepStatus(s), failedSteps(j)))
		case j.Fault.Kind == FaultPermanent && !strings.Contains(s.Reason, injectedFault):
			out = append(out, fmt.Sprintf("%s failed at %s for another reason than its fault: %q", j.name(), s.ID, s.Reason))
		}
	}
	return out
}

// checkEffects: a succeeded step's work committed exactly once (one
// worker_effects row, one transition to SUCCEEDED), and a step that did not
// succeed committed nothing. The transition count catches an effect applied
// twice even though worker_effects' key cannot hold two rows. Only a step
// cancelled because its job had already ended may have committed its work.
func checkEffects(j *jobRecord, sh shape) []string {
	var out []string
	for _, ts := range sh.steps {
		s := j.Steps[ts.ID]
		if s == nil {
			continue
		}
		if s.Status == statusSucceeded {
			if s.Effects != 1 {
				out = append(out, fmt.Sprintf("%s step %s SUCCEEDED with %d worker effects, want 1", j.name(), s.ID, s.Effects))
			}
			if s.SucceededEvents != 1 {
				out = append(out, fmt.Sprintf("%s step %s moved to SUCCEEDED %d times, want once", j.name(), s.ID, s.SucceededEvents))
			}
			continue
		}
		if s.SucceededEvents != 0 {
			out = append(out, fmt.Sprintf("%s step %s is %s but moved to SUCCEEDED %d times", j.name(), s.ID, s.Status, s.SucceededEvents))
		}
		if s.Effects != 0 && (s.Status != statusCancelled || j.Status == statusSucceeded) {
			out = append(out, fmt.Sprintf("%s step %s is %s but a worker committed its effect", j.name(), s.ID, s.Status))
		}
	}
	return out
}

// checkTransitions: nothing leaves a terminal status, and a terminal job
// got there once, to the status it has.
func checkTransitions(j *jobRecord, _ shape) []string {
	var out []string
	var ends []string
	for _, e := range j.Events {
		if (e.Type == "JOB_STATUS_CHANGED" && terminalJob[e.From]) || (e.Type == "STEP_STATUS_CHANGED" && terminalStep[e.From]) {
			out = append(out, fmt.Sprintf("%s: %s of step %q from terminal %s to %s (%s) at %s",
				j.name(), e.Type, e.StepID, e.From, e.To, e.Reason, e.At.Format("15:04:05.000")))
		}
		if e.Type == "JOB_STATUS_CHANGED" && terminalJob[e.To] {
			ends = append(ends, e.To)
		}
	}
	if terminalJob[j.Status] && (len(ends) != 1 || ends[0] != j.Status) {
		out = append(out, fmt.Sprintf("%s is %s but its events end it %d times (%s)", j.name(), j.Status, len(ends), strings.Join(ends, ", ")))
	}
	return out
}

func stepStatus(s *stepRecord) string {
	if s == nil {
		return "missing"
	}
	return s.Status
}

// failedSteps lists a job's FAILED_FINAL steps and their reasons, for a problem.
func failedSteps(j *jobRecord) string {
	var parts []string
	for _, s := range j.Steps {
		if s.Status == statusFailedFinal {
			parts = append(parts, fmt.Sprintf("%s after %d attempts: %q", s.ID, s.AttemptNo, s.Reason))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return "; failed " + strings.Join(parts, ", ")
}
