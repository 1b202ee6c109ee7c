package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/runbook"
)

const contosoCSV = "member_key,batch_time,display_name,email\n" +
	"a@contoso.com,2025-03-15T00:00:00Z,Ann,a@contoso.com\n" +
	"b@contoso.com,2025-03-15T01:00:00+01:00,\"Bee, B.\",\n"

func mustRead(t *testing.T, csv string) []runbook.Member {
	t.Helper()
	members, err := runbook.ReadCSV(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	return members
}

func TestRequestsMapEachCSVRecordToAMember(t *testing.T) {
	t.Parallel()
	for _, replace := range []bool{false, true} {
		reqs, err := requests("contoso-mailbox-migration", 3, mustRead(t, contosoCSV), replace, server.DefaultMaxRequestBytes)
		if err != nil {
			t.Fatal(err)
		}
		// Times in UTC; an empty field is an empty value, not a missing one.
		want := fmt.Sprintf(`{"name":"contoso-mailbox-migration","version":3,"replace":%v,"members":[
			{"memberKey":"a@contoso.com","batchTime":"2025-03-15T00:00:00Z","values":{"display_name":"Ann","email":"a@contoso.com"}},
			{"memberKey":"b@contoso.com","batchTime":"2025-03-15T00:00:00Z","values":{"display_name":"Bee, B.","email":""}}]}`, replace)
		if !replace {
			want = strings.Replace(want, `"replace":false,`, "", 1)
		}
		wantReq := &luciusv1.LoadMembersRequest{}
		if err := protojson.Unmarshal([]byte(want), wantReq); err != nil {
			t.Fatal(err)
		}
		if len(reqs) != 1 || !proto.Equal(reqs[0], wantReq) {
			t.Fatalf("replace %v: requests %v, want %v", replace, reqs, wantReq)
		}
	}
	reqs, err := requests("r", 0, nil, false, server.DefaultMaxRequestBytes)
	if err != nil || len(reqs) != 1 || len(reqs[0].GetMembers()) != 0 || reqs[0].GetName() != "r" {
		t.Fatalf("an empty file: %v, %v", reqs, err)
	}
}

func manyMembers(n int, value string) []runbook.Member {
	out := make([]runbook.Member, n)
	for i := range out {
		out[i] = runbook.Member{Key: fmt.Sprintf("user%06d@contoso.com", i), BatchTime: time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC),
			Values: map[string]string{"email": value}}
	}
	return out
}

func TestRequestsSplitLargeFilesUnlessTheyReplace(t *testing.T) {
	t.Parallel()
	const big = 8 << 20 // a gateway that takes 8 MiB
	tests := []struct {
		name     string
		members  []runbook.Member
		replace  bool
		maxBytes int
		parts    []int // members per call; nil: refused (replace), or more than one (else)
	}{
		{"small", manyMembers(10, "x"), false, server.DefaultMaxRequestBytes, []int{10}},
		{"more rows than a call takes", manyMembers(maxRows+1, "x"), false, big, []int{maxRows, 1}},
		{"more bytes than a call takes", manyMembers(30_000, strings.Repeat("x", 200)), false, server.DefaultMaxRequestBytes, nil},
		{"more bytes than a call takes with a larger limit", manyMembers(30_000, strings.Repeat("x", 200)), false, 3 << 20, nil},
		{"replace in one call", manyMembers(maxRows, "x"), true, big, []int{maxRows}},
		{"replace with too many rows", manyMembers(maxRows+1, "x"), true, big, nil},
		{"replace with more bytes than a call takes", manyMembers(maxRows, "x"), true, server.DefaultMaxRequestBytes, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := requests("r", 0, tt.members, tt.replace, tt.maxBytes)
			if tt.parts == nil && tt.replace {
				if err == nil {
					t.Fatalf("a replace of %d members in %d bytes was not refused", len(tt.members), tt.maxBytes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var parts []int
			total := 0
			for _, r := range reqs {
				parts = append(parts, len(r.GetMembers()))
				total += len(r.GetMembers())
				if proto.Size(r) > tt.maxBytes || len(r.GetMembers()) > maxRows {
					t.Fatalf("a call of %d members and %d bytes", len(r.GetMembers()), proto.Size(r))
				}
				if r.GetReplace() != tt.replace {
					t.Fatalf("replace %v in a call", r.GetReplace())
				}
			}
			if total != len(tt.members) || tt.parts != nil && fmt.Sprint(parts) != fmt.Sprint(tt.parts) || tt.parts == nil && len(parts) < 2 {
				t.Fatalf("parts %v, want %v", parts, tt.parts)
			}
		})
	}
}

// fakeRunbooks answers LoadMembers like the gateway: version 0 is version 4;
// a member called "bad" is refused with a field violation.
type fakeRunbooks struct {
	luciusv1.UnimplementedRunbookServiceServer
	mu    sync.Mutex
	calls []*luciusv1.LoadMembersRequest
}

func (f *fakeRunbooks) LoadMembers(_ context.Context, req *luciusv1.LoadMembersRequest) (*luciusv1.LoadMembersResponse, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	for i, m := range req.GetMembers() {
		if m.GetMemberKey() == "bad" {
			return nil, server.InvalidArgument(server.Violation{Field: fmt.Sprintf("members[%d].values.colour", i),
				Description: `unknown column "colour"`}).Err()
		}
	}
	v := req.GetVersion()
	if v == 0 {
		v = 4
	}
	return &luciusv1.LoadMembersResponse{Version: v, Inserted: int32(len(req.GetMembers())), Removed: 1}, nil
}

func startFake(t *testing.T) (*fakeRunbooks, luciusv1.RunbookServiceClient) {
	t.Helper()
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	fake := &fakeRunbooks{}
	luciusv1.RegisterRunbookServiceServer(srv, fake)
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fake, luciusv1.NewRunbookServiceClient(conn)
}

func TestLoadAddsUpThePartsAndPinsTheVersionTheFirstResolved(t *testing.T) {
	t.Parallel()
	fake, client := startFake(t)
	reqs, err := requests("r", 0, manyMembers(maxRows+5, "x"), false, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	total, err := load(context.Background(), client, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if total.GetVersion() != 4 || total.GetInserted() != maxRows+5 || total.GetRemoved() != 2 {
		t.Fatalf("total %v", total)
	}
	if len(fake.calls) != 2 || fake.calls[0].GetVersion() != 0 || fake.calls[1].GetVersion() != 4 {
		t.Fatalf("calls named versions %d and %d, want 0 then 4", fake.calls[0].GetVersion(), fake.calls[1].GetVersion())
	}
}

func TestLoadNamesRefusedMembersByTheirPlaceInTheFile(t *testing.T) {
	t.Parallel()
	_, client := startFake(t)
	members := manyMembers(maxRows+3, "x")
	members[maxRows+1].Key = "bad"
	reqs, err := requests("r", 0, members, false, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, err = load(context.Background(), client, reqs)
	want := "InvalidArgument: invalid members:\n  members[50001].values.colour: unknown column \"colour\" (the first 50000 members were loaded)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

// The command reads the file (or stdin), calls as the context's principal
// through the real guard (an operator), and prints what the load did.
func TestMembersLoadReadsTheFileAndPrintsTheCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "members.csv")
	if err := os.WriteFile(path, []byte(contosoCSV), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := authtest.New(t)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(issuer.Guard().UnaryServerInterceptor()))
	luciusv1.RegisterRunbookServiceServer(srv, &fakeRunbooks{})
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(srv.Stop)
	t.Setenv("LUCIUS_ADDR", l.Addr().String())
	t.Setenv("LUCIUS_CONFIG", filepath.Join(t.TempDir(), "none.yaml"))
	lucius := func(token string, stdin string, args ...string) (string, error) {
		t.Setenv("LUCIUS_TOKEN", token)
		root := rootCommand()
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetIn(strings.NewReader(stdin))
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	operator := issuer.Token(t, authtest.Operator())
	for _, file := range []string{path, "-"} {
		out, err := lucius(operator, contosoCSV, "members", "load", "contoso-mailbox-migration", file, "--replace")
		if err != nil {
			t.Fatal(err)
		}
		want := file + ": 2 members loaded into contoso-mailbox-migration v4: 2 inserted, 0 updated, 0 unchanged, 1 removed\n"
		if out != want {
			t.Fatalf("printed %q, want %q", out, want)
		}
	}
	if _, err := lucius(operator, "member_key,batch_time\nx,yesterday\n", "members", "load", "r", "-"); exitCode(err) != exitUsage ||
		!strings.Contains(err.Error(), `line 2, column 2 (batch_time): "yesterday" is not an RFC 3339 time`) {
		t.Fatalf("a bad file: %v (exit %d)", err, exitCode(err))
	}
	if _, err := lucius(issuer.Token(t, authtest.Partner("acme")), contosoCSV, "members", "load", "r", path); exitCode(err) != exitDenied {
		t.Fatalf("a partner loads members: %v (exit %d), want exit %d", err, exitCode(err), exitDenied)
	}
}
