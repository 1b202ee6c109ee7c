package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/tools/stack"
)

// profiler takes a CPU profile of every Lucius process while a run goes
// on (-profile DIR): each process serves /debug/pprof/ (LUCIUS_PPROF=true),
// and one profile per process covers the same stretch of the run.
type profiler struct {
	dir     string
	seconds int
	wg      sync.WaitGroup
	mu      sync.Mutex
	written []string
	errs    []error
}

// start begins a profile of every process of s, asked for with an
// operator's token (the operations endpoints are authenticated); wait
// collects them.
func (p *profiler) start(ctx context.Context, s *stack.Stack, token string) {
	for _, name := range s.Names() {
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.Process(name).OpsURL(), p.seconds)
		path := filepath.Join(p.dir, name+".pprof")
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			err := fetchTo(ctx, url, token, path, time.Duration(p.seconds+30)*time.Second)
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
				return
			}
			p.written = append(p.written, path)
		}()
	}
}

// wait waits for the profiles and says where they are.
func (p *profiler) wait() {
	p.wg.Wait()
	fmt.Printf("\n  CPU profiles (%d s each, from the start of the run): %d in %s (go tool pprof -top FILE)\n", p.seconds, len(p.written), p.dir)
	for _, err := range p.errs {
		fmt.Printf("    not taken: %v\n", err)
	}
}

func fetchTo(ctx context.Context, url, token, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close() // the copy failed: that error is the one to report
		return err
	}
	return f.Close()
}
