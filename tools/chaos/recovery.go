package chaos

import "time"

// Stall is how long the jobs live at a disruption went without progress.
type Stall struct {
	Disruption
	// Stall is the longest wait, over the jobs live at the disruption, from
	// the disruption (or the end of a deliberate wait) to the job's next
	// event; Job is the job that waited longest.
	Stall time.Duration
	Job   string
	// Live counts the jobs live (accepted, not yet terminal) at the disruption.
	Live int
}

// stalls measures every disruption against the jobs' event trails.
func stalls(ds []Disruption, jobs []*jobRecord) []Stall {
	out := make([]Stall, 0, len(ds))
	for _, d := range ds {
		st := Stall{Disruption: d}
		for _, j := range jobs {
			w, live := waitAfter(j, d.At)
			if !live {
				continue
			}
			st.Live++
			if w > st.Stall || st.Job == "" {
				st.Stall, st.Job = w, j.ID
			}
		}
		out = append(out, st)
	}
	return out
}

// waitAfter is how long job j, if live at at, waited for its next event,
// counted from at or from the end of a deliberate wait in progress at at,
// whichever is later: a retry's backoff (the attempt's deliver_at) or an
// injected sleep (its step's ACK plus the sleep). A job that never had an
// event after at is left out: it is reported as not terminal.
func waitAfter(j *jobRecord, at time.Time) (time.Duration, bool) {
	if j.ReceivedAt.IsZero() || !j.ReceivedAt.Before(at) {
		return 0, false
	}
	if !j.CompletedAt.IsZero() && !j.CompletedAt.After(at) {
		return 0, false
	}
	var due, sleepEnd time.Time
	for _, e := range j.Events { // in time order
		if e.At.After(at) {
			return max(0, e.At.Sub(latest(at, due, sleepEnd))), true
		}
		switch {
		case e.Type == "ATTEMPT_CREATED":
			due = e.DeliverAt
		case !sleeps(j, e.StepID):
		case e.Type == "STEP_STATUS_CHANGED":
			sleepEnd = time.Time{}
			if e.To == "IN_PROGRESS" {
				sleepEnd = e.At.Add(j.Fault.Sleep)
			}
		case e.Type == "CALLBACK_DUPLICATE" && e.Callback == "ACK":
			// A worker took over the attempt after its first one died: it
			// sleeps again before it executes.
			sleepEnd = e.At.Add(j.Fault.Sleep)
		}
	}
	return 0, false
}

// sleeps reports whether job j's step stepID was told to sleep.
func sleeps(j *jobRecord, stepID string) bool {
	return j.Fault != nil && j.Fault.Kind == FaultSleep && j.Fault.Step == stepID
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}
