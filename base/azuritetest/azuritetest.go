// Package azuritetest starts Azurite, the Azure Storage emulator (npm
// package azurite, pinned in tools/azurite/package-lock.json), for tests of
// az:// blob refs, the way sbtest starts the Service Bus test broker: it
// installs the package with `npm ci` into .build/azurite when it is missing,
// starts the blob service on a free loopback port with in-memory storage,
// waits until it listens and stops it on cleanup.
//
//	az := azuritetest.Start(t)
//	az.CreateContainer(t, "inputs")
//	// endpoints: {az.Account: az.Endpoint}, shared key az.Key
package azuritetest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/nodeproc"
)

// Azurite's well-known development account and key (documented by
// Microsoft; they open nothing but a local emulator). Use them only where a
// test or an operator configures Azurite explicitly.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Server is a running Azurite blob service.
type Server struct {
	// Endpoint is the account's blob endpoint (path-style:
	// http://127.0.0.1:<port>/devstoreaccount1).
	Endpoint string
	// Account and Key authenticate with a shared key.
	Account, Key string

	proc *nodeproc.Process
}

// Start starts Azurite for t and stops it when t's cleanup runs.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartServer(context.Background())
	if errors.Is(err, nodeproc.ErrNoNode) {
		t.Fatalf("azuritetest: %v (install Node.js and npm, e.g. apt-get install nodejs npm; make test then installs Azurite)", err)
	}
	if err != nil {
		t.Fatalf("azuritetest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts Azurite outside a test (e.g. for a stack); Stop it.
func StartServer(ctx context.Context) (*Server, error) {
	proc, ports, err := nodeproc.StartOnFreePorts(ctx, 1, func(ports []int) nodeproc.Spec {
		return nodeproc.Spec{
			Tool: "azurite",
			Script: func(_, modules string) string {
				return filepath.Join(modules, "azurite", "dist", "src", "blob", "main.js")
			},
			Args: []string{"--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(ports[0]), "--inMemoryPersistence",
				"--extentMemoryLimit", "512", "--skipApiVersionCheck", "--disableTelemetry", "--silent", "--loose"},
			Ready: "Azurite Blob service successfully listens",
		}
	})
	if err != nil {
		return nil, fmt.Errorf("azurite: %w", err)
	}
	return &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/%s", ports[0], Account), Account: Account, Key: Key, proc: proc}, nil
}

// Stop ends Azurite and waits for it.
func (s *Server) Stop() { s.proc.Stop() }

// Output is what Azurite printed so far.
func (s *Server) Output() string { return s.proc.Output() }

// CreateContainer creates a container (Lucius never creates them: in
// production the operator does).
func (s *Server) CreateContainer(t testing.TB, name string) {
	t.Helper()
	if err := s.Create(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}

// Create creates a container outside a test; one that exists is fine.
func (s *Server) Create(ctx context.Context, name string) error {
	_, err := s.do(ctx, http.MethodPut, name+"?restype=container", nil, http.StatusCreated, http.StatusConflict)
	return err
}

// Put writes a block blob, e.g. a job's input.
func (s *Server) Put(ctx context.Context, container, name string, data []byte) error {
	_, err := s.do(ctx, http.MethodPut, container+"/"+name, data, http.StatusCreated)
	return err
}

// Get reads a blob, e.g. a job's output.
func (s *Server) Get(ctx context.Context, container, name string) ([]byte, error) {
	return s.do(ctx, http.MethodGet, container+"/"+name, nil, http.StatusOK)
}

// do sends one request signed with the account key and returns the body of
// an answer with one of the statuses wanted.
func (s *Server) do(ctx context.Context, method, path string, body []byte, want ...int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.Endpoint+"/"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if method == http.MethodPut && !strings.Contains(path, "restype=") {
		req.Header.Set("x-ms-blob-type", "BlockBlob")
	}
	if err := signSharedKey(req, s.Account, s.Key, len(body)); err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if !slices.Contains(want, resp.StatusCode) {
		return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(out))
	}
	return out, nil
}

// signSharedKey signs a request whose only standard content header is
// Content-Length the way Azure Storage's Shared Key scheme asks (the
// requests this package sends itself; code under test uses azblob).
func signSharedKey(req *http.Request, account, key string, contentLength int) error {
	secret, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return err
	}
	req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	req.Header.Set("x-ms-version", "2021-12-02")
	var headers []string
	for name := range req.Header {
		if lower := strings.ToLower(name); strings.HasPrefix(lower, "x-ms-") {
			headers = append(headers, lower+":"+req.Header.Get(name)+"\n")
		}
	}
	sort.Strings(headers)
	resource := "/" + account + req.URL.EscapedPath()
	query := req.URL.Query()
	names := make([]string, 0, len(query))
	for name := range query {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		resource += "\n" + strings.ToLower(name) + ":" + strings.Join(query[name], ",")
	}
	// VERB, Content-Encoding, Content-Language, Content-Length (empty when
	// 0), then eight more standard headers (empty here), then the rest.
	length := ""
	if contentLength > 0 {
		length = strconv.Itoa(contentLength)
	}
	toSign := req.Method + "\n\n\n" + length + strings.Repeat("\n", 9) + strings.Join(headers, "") + resource
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(toSign))
	req.Header.Set("Authorization", "SharedKey "+account+":"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return nil
}
