package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// floodConfig is the -flood scenario (seed 004 §10): one tenant submits with
// 10x its concurrent job limit in flight, retrying at once when refused; we
// measure another tenant's Submit latency at a steady rate, alone and during
// the flood. Each step takes floodStepDelay (LUCIUS_WORKER_DELAY), as real
// work does.
type floodConfig struct {
	// token authenticates the flooding client process (an operator token).
	token    string
	limit    int     // the flooding tenant's concurrent job limit
	factor   int     // its submitters, in multiples of limit (default 10)
	calmRate float64 // the calm tenant's submits per second (default 20)
	calm     int     // the calm tenant's samples per condition
	samples  string  // file to write every calm sample to (CSV), or ""
}

var floodCfg *floodConfig

const (
	// floodStepDelay is how long each step takes in the flood scenario.
	floodStepDelay = 500 * time.Millisecond
	// The flooding tenant's clients are switched on and off in windows of
	// floodWindow. After one starts, floodSettle passes before samples count
	// (its submitters reach their pace, the other's paced refusals in flight
	// are answered); after both stop, floodDrain passes before samples count
	// as alone (its admitted jobs, three steps each, finish too).
	floodWindow = 6 * time.Second
	floodSettle = time.Second
	floodDrain  = 2500 * time.Millisecond
)

// Conditions a calm sample is taken in.
const (
	condWarmUp     = "warm-up"
	condAlone      = "alone"
	condFlood      = "flood"
	condAtLimit    = "at-limit"
	condTransition = "transition" // the flood starting or stopping: not counted
)

func runFlood(ctx context.Context, cfg floodConfig, conn *grpc.ClientConn, db *pgxpool.Pool, input, workspace string, payload *structpb.Struct) error {
	// p99 of fewer than ~1,000 samples is the few slowest calls, noise on a
	// shared two-core machine; -n sets the samples per condition (at most 3,000).
	cfg.calm = min(cfg.calm, 3000)
	configs := luciusv1.NewConfigServiceClient(conn)
	limit := int32(cfg.limit)
	if _, err := configs.UpdateTenantConfig(ctx, &luciusv1.UpdateTenantConfigRequest{Config: &luciusv1.TenantConfig{
		TenantId: "flood", MaxActiveJobs: &limit}}); err != nil {
		return err
	}
	client := luciusv1.NewCommandServiceClient(conn)
	fmt.Printf("flood scenario: calm tenant at %.0f submits/s, %d samples per condition; the flooding tenant (limit %d) absent, at its limit (%d submitters) or flooding (%d submitters), changing every %s\n",
		cfg.calmRate, cfg.calm, cfg.limit, cfg.limit, cfg.factor*cfg.limit, floodWindow)

	// The calm tenant submits at a steady rate for the whole run; each
	// sample is counted in the condition that held from its start to its end.
	var condition atomic.Value
	condition.Store(condWarmUp)
	var window atomic.Int64 // which window a sample started in
	began := time.Now()
	var mu sync.Mutex
	var sampleRows []string // every calm sample: condition, window, when (Unix seconds), latency
	byCondition := map[string][]floodSample{}
	var calmErr error // the first failed calm submit, under mu
	calmCtx, stopCalm := context.WithCancel(ctx)
	defer stopCalm()
	calmDone := make(chan struct{})
	go func() {
		defer close(calmDone)
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := 0; calmCtx.Err() == nil; i++ {
			time.Sleep(time.Until(began.Add(time.Duration(float64(i) / cfg.calmRate * float64(time.Second)))))
			wg.Add(1)
			go func() { // open loop: a slow call does not delay the next
				defer wg.Done()
				c0, w, at := condition.Load().(string), window.Load(), time.Since(began)
				_, err := client.Submit(ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{
					TenantId: "calm", RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: input,
					OutputRef: fmt.Sprintf("file://%s/out/calm-%d.json", workspace, i), Payload: payload,
					IdempotencyKey: fmt.Sprintf("calm-%d-%d", began.UnixNano(), i)}})
				d := time.Since(began) - at
				c := c0
				if condition.Load().(string) != c0 {
					c = condTransition
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if calmErr == nil {
						calmErr = fmt.Errorf("calm submit: %w", err)
					}
					stopCalm()
					return
				}
				byCondition[c] = append(byCondition[c], floodSample{window: w, latency: d})
				sampleRows = append(sampleRows, fmt.Sprintf("%s,%d,%.3f,%.3f", c, w, float64(began.Add(at).UnixMilli())/1000, float64(d)/float64(time.Millisecond)))
			}()
		}
	}()
	// stopped stops the calm tenant and returns why it failed, if it did.
	stopped := func() error {
		stopCalm()
		<-calmDone
		mu.Lock()
		defer mu.Unlock()
		return calmErr
	}
	count := func(c string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(byCondition[c])
	}
	wait := func(d time.Duration) error {
		select {
		case <-calmCtx.Done():
			if err := stopped(); err != nil {
				return err
			}
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}

	if err := wait(10 * time.Second); err != nil { // warm-up
		return err
	}
	// Two clients of the flooding tenant, one running at a time: one keeps
	// its limit's worth of submits in flight (a tenant using what it is
	// allowed), the other factor times that (the flood).
	atLimit, err := startFlooder(ctx, cfg, 1, conn.Target(), input, workspace)
	if err != nil {
		return err
	}
	defer atLimit.cmd.Process.Kill() //nolint:errcheck // gone already unless the run failed
	flood, err := startFlooder(ctx, cfg, cfg.factor, conn.Target(), input, workspace)
	if err != nil {
		return err
	}
	defer flood.cmd.Process.Kill() //nolint:errcheck
	// Windows cycle flooded, alone and at the limit, many times over, so
	// that what else happens on the machine (a vacuum, a burst of other
	// work, the tables growing) falls on every condition alike.
	cycle := []struct {
		condition string
		running   *flooder
		hold      time.Duration
	}{{condFlood, flood, floodSettle}, {condAlone, nil, floodDrain}, {condAtLimit, atLimit, floodSettle}}
	on := map[*flooder]time.Duration{} // how long each client ran
	cpu := newCPUMeter(db)
	for i := 0; count(condAlone) < cfg.calm || count(condFlood) < cfg.calm || count(condAtLimit) < cfg.calm; i++ {
		w := cycle[i%len(cycle)]
		condition.Store(condTransition)
		window.Store(int64(i))
		t0 := time.Now()
		for _, f := range []*flooder{atLimit, flood} {
			if err := f.pause(f != w.running); err != nil {
				return err
			}
		}
		if err := wait(w.hold); err != nil {
			return err
		}
		condition.Store(w.condition)
		cpu.begin(ctx)
		if err := wait(floodWindow - w.hold); err != nil {
			return err
		}
		cpu.end(ctx, w.condition)
		if w.running != nil {
			on[w.running] += time.Since(t0)
		}
	}
	condition.Store(condTransition)
	if err := stopped(); err != nil {
		return err
	}
	floodCounts, err := flood.stop()
	if err != nil {
		return err
	}
	limitCounts, err := atLimit.stop()
	if err != nil {
		return err
	}
	fmt.Println()
	for _, c := range []struct {
		name   string
		counts [3]int64
		on     time.Duration
	}{{"at its limit", limitCounts, on[atLimit]}, {"flooding", floodCounts, on[flood]}} {
		fmt.Printf("RESULT flooding tenant %-13s %5d accepted (%.1f/s), %6d refused (429, %.0f/s), %d failed\n", c.name,
			c.counts[0], float64(c.counts[0])/c.on.Seconds(), c.counts[1], float64(c.counts[1])/c.on.Seconds(), c.counts[2])
	}
	alone, limited, flooded := byCondition[condAlone], byCondition[condAtLimit], byCondition[condFlood]
	for _, c := range []struct {
		name    string
		samples []floodSample
	}{{"alone", alone}, {"flooding tenant at its limit", limited}, {fmt.Sprintf("flooding tenant at %dx", cfg.factor), flooded}} {
		lat := latencies(c.samples)
		fmt.Printf("  calm tenant Submit, %-29s p50 %-7s p95 %-7s p99 %-7s (%d samples)\n", c.name, pct(lat, 50), pct(lat, 95), pct(lat, 99), len(lat))
	}
	cpu.report(condAlone, condAtLimit, condFlood)
	fmt.Println("  p99 ratios, with 95% intervals from resampling whole windows (a slow second lands in one window, not in one sample):")
	for _, r := range []struct {
		name string
		a, b []floodSample
	}{{"flooded / alone (goal <= 1.50)", flooded, alone}, {"flooded / at its limit", flooded, limited}, {"at its limit / alone", limited, alone}} {
		ratio, lo, hi := p99Ratio(r.a, r.b)
		fmt.Printf("    %-31s %.2f  [%.2f, %.2f]\n", r.name, ratio, lo, hi)
	}
	if cfg.samples != "" {
		return os.WriteFile(cfg.samples, []byte("condition,window,unix_s,latency_ms\n"+strings.Join(sampleRows, "\n")+"\n"), 0o644)
	}
	return nil
}

// floodSample is one calm submit and the window it started in.
type floodSample struct {
	window  int64
	latency time.Duration
}

func latencies(samples []floodSample) []time.Duration {
	out := make([]time.Duration, len(samples))
	for i, s := range samples {
		out[i] = s.latency
	}
	return out
}

// p99Ratio is p99(a) / p99(b) with a 95% interval from a block bootstrap:
// each resample draws whole windows with replacement, so that latencies that
// move together (a vacuum, a stall of the machine) move together in the
// resample too, and the interval says how much the ratio depends on which
// windows a few slow seconds fell in.
func p99Ratio(a, b []floodSample) (ratio, lo, hi float64) {
	ratio = float64(pct(latencies(a), 99)) / float64(pct(latencies(b), 99))
	byWindow := func(samples []floodSample) [][]time.Duration {
		index := map[int64]int{}
		var out [][]time.Duration
		for _, s := range samples {
			i, ok := index[s.window]
			if !ok {
				i = len(out)
				index[s.window] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], s.latency)
		}
		return out
	}
	wa, wb := byWindow(a), byWindow(b)
	if len(wa) == 0 || len(wb) == 0 {
		return ratio, 0, 0
	}
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: a fixed seed, so the same samples give the same interval
	resample := func(windows [][]time.Duration) time.Duration {
		var pooled []time.Duration
		for range windows {
			pooled = append(pooled, windows[rng.IntN(len(windows))]...)
		}
		return pct(pooled, 99)
	}
	const rounds = 1000
	ratios := make([]float64, rounds)
	for i := range ratios {
		ratios[i] = float64(resample(wa)) / float64(resample(wb))
	}
	slices.Sort(ratios)
	return ratio, ratios[rounds*25/1000], ratios[rounds*975/1000-1]
}

// flooder is the flooding client: its own process at the lowest CPU
// priority (on a one-machine benchmark its client-side work would otherwise
// be counted against the suite, which in production runs on other
// machines), paused and resumed with SIGSTOP and SIGCONT.
type flooder struct {
	cmd *exec.Cmd
	out io.Reader
}

func startFlooder(ctx context.Context, cfg floodConfig, factor int, target, input, workspace string) (*flooder, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nice", "-n", "19", self, "-flood-client", target,
		"-flood-limit", strconv.Itoa(cfg.limit), "-flood-factor", strconv.Itoa(factor), "-flood-input", input, "-flood-workspace", workspace)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), "LUCIUS_TOKEN="+cfg.token)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &flooder{cmd: cmd, out: out}, nil
}

func (f *flooder) pause(paused bool) error {
	if paused {
		return f.cmd.Process.Signal(syscall.SIGSTOP)
	}
	return f.cmd.Process.Signal(syscall.SIGCONT)
}

// stop ends the flood and returns its accepted, refused and failed counts.
func (f *flooder) stop() ([3]int64, error) {
	var counts [3]int64
	_ = f.cmd.Process.Signal(syscall.SIGCONT)
	if err := f.cmd.Process.Signal(os.Interrupt); err != nil {
		return counts, err
	}
	report, err := io.ReadAll(f.out)
	if err != nil {
		return counts, err
	}
	if err := f.cmd.Wait(); err != nil {
		return counts, fmt.Errorf("flooding client: %w", err)
	}
	_, err = fmt.Sscanf(string(report), "%d %d %d", &counts[0], &counts[1], &counts[2])
	return counts, err
}

// floodClient is the flooding tenant (-flood-client): submitters (10x its
// limit), each submitting again at once whatever the answer, until
// interrupted; it prints "accepted refused failed".
func floodClient(target string, submitters int, input, workspace string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	conn, err := server.Dial(target, grpc.WithPerRPCCredentials(auth.BearerToken(os.Getenv("LUCIUS_TOKEN"))))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := luciusv1.NewCommandServiceClient(conn)
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"flood"}})
	var seq, accepted, refused, failed atomic.Int64
	var wg sync.WaitGroup
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := seq.Add(1)
				_, err := client.Submit(ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{
					TenantId: "flood", RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: input,
					OutputRef: fmt.Sprintf("file://%s/out/flood-%d.json", workspace, i), Payload: payload,
					IdempotencyKey: fmt.Sprintf("flood-%d-%d", os.Getpid(), i)}})
				switch status.Code(err) {
				case codes.OK:
					accepted.Add(1)
				case codes.ResourceExhausted:
					refused.Add(1)
				default:
					if ctx.Err() == nil {
						failed.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println(accepted.Load(), refused.Load(), failed.Load())
	return nil
}
