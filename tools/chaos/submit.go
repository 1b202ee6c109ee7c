package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/loop"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// tenant submits every chaos job.
const tenant = "chaos"

// submitters is how many clients submit at once; pacing, not their number,
// sets the rate.
const submitters = 8

// submitTimeout bounds one Submit call.
const submitTimeout = 10 * time.Second

// submission is what submitting the plan did.
type submission struct {
	// ids holds each planned job's id, "" when it was never accepted.
	ids []string
	// retried counts submits that needed more than one call; duplicates those
	// whose retry found the job already accepted (the first call committed).
	retried, duplicates int
	// errors counts failed Submit calls by gRPC code.
	errors   map[codes.Code]int
	problems []string
}

// command builds job i's command. The idempotency key makes a retried submit
// the same job; the payload carries the fault (if any).
func command(i int, f *Fault, inputRef, outputDir string) (*luciusv1.Command, error) {
	fields := map[string]any{"job": i}
	if f != nil {
		fields["fault"] = f.payload()
	}
	payload, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, fmt.Errorf("payload of job %d: %w", i, err)
	}
	return &luciusv1.Command{TenantId: tenant, RequestType: workflowID, SchemaVersion: "1",
		InputRef: inputRef, OutputRef: fmt.Sprintf("file://%s/%d.json", outputDir, i),
		Payload: payload, IdempotencyKey: fmt.Sprintf("chaos-%d", i)}, nil
}

// submitAll submits cmds at rate per second, retrying each until it is
// accepted, refused for good, or ctx ends. halfway is called once half the
// jobs are accepted.
func submitAll(ctx context.Context, client luciusv1.CommandServiceClient, cmds []*luciusv1.Command, rate float64, halfway func()) submission {
	out := submission{ids: make([]string, len(cmds)), errors: map[codes.Code]int{}}
	var (
		mu       sync.Mutex
		next     atomic.Int64
		accepted atomic.Int64
		once     sync.Once
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range submitters {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(cmds) {
					return
				}
				// Open loop: job i is not submitted before start + i/rate.
				if !loop.Sleep(ctx, time.Until(start.Add(time.Duration(float64(i)/rate*float64(time.Second))))) {
					return
				}
				r := submitOne(ctx, client, cmds[i])
				mu.Lock()
				out.ids[i] = r.jobID
				if r.calls > 1 {
					out.retried++
				}
				if r.duplicate {
					out.duplicates++
				}
				for code, n := range r.errors {
					out.errors[code] += n
				}
				out.problems = append(out.problems, r.problems...)
				mu.Unlock()
				if r.jobID != "" && int(accepted.Add(1)) == (len(cmds)+1)/2 {
					once.Do(halfway)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// oneSubmit is what submitting one command took.
type oneSubmit struct {
	jobID     string
	calls     int
	duplicate bool
	errors    map[codes.Code]int
	problems  []string
}

// submitOne submits cmd until it is accepted. Unavailable and
// DeadlineExceeded are what a PostgreSQL restart or a slow gateway may
// answer; other retriable codes are retried too but reported, and a refusal
// ends the attempt.
func submitOne(ctx context.Context, client luciusv1.CommandServiceClient, cmd *luciusv1.Command) oneSubmit {
	out := oneSubmit{errors: map[codes.Code]int{}}
	backoff := 100 * time.Millisecond
	reported := map[codes.Code]bool{}
	for {
		out.calls++
		cctx, cancel := context.WithTimeout(ctx, submitTimeout)
		resp, err := client.Submit(cctx, &luciusv1.SubmitRequest{Command: cmd})
		cancel()
		if err == nil {
			out.jobID, out.duplicate = resp.GetJobId(), out.calls > 1 && resp.GetDuplicate()
			return out
		}
		if ctx.Err() != nil {
			out.problems = append(out.problems, fmt.Sprintf("job %s not accepted before the deadline: %v", cmd.GetIdempotencyKey(), err))
			return out
		}
		code := status.Code(err)
		out.errors[code]++
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded:
		case codes.Internal, codes.Unknown, codes.Aborted, codes.ResourceExhausted:
			if !reported[code] {
				reported[code] = true
				out.problems = append(out.problems, fmt.Sprintf("submit %s answered %v (want UNAVAILABLE while the ledger is down): %v",
					cmd.GetIdempotencyKey(), code, err))
			}
		default:
			out.problems = append(out.problems, fmt.Sprintf("submit %s refused: %v", cmd.GetIdempotencyKey(), err))
			return out
		}
		if !loop.Sleep(ctx, backoff) {
			out.problems = append(out.problems, fmt.Sprintf("job %s not accepted before the deadline: %v", cmd.GetIdempotencyKey(), err))
			return out
		}
		backoff = min(2*backoff, time.Second)
	}
}
