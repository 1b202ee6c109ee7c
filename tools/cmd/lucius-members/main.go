// Command lucius-members loads a runbook's member data from a CSV file
// through the gateway (RunbookService.LoadMembers over gRPC) and prints what
// the load did.
//
//	lucius-members -runbook contoso-mailbox-migration [-version 3] [-replace] [-gateway 127.0.0.1:9090] members.csv
//	export-members | lucius-members -runbook contoso-mailbox-migration -replace -
//
// The file has a header "member_key,batch_time,<columns...>" and one member a
// line, batch_time in RFC 3339 (2025-03-15T00:00:00Z); see runbook.ReadCSV.
// With -replace the file is the whole data source: the members it lacks are
// no longer current, so it is sent in one call (at most 50,000 members and
// the gateway's request limit, LUCIUS_MAX_REQUEST_BYTES, 1 MiB by default:
// some 7,000 typical rows; -max-request-bytes, by default that variable,
// says what the gateway takes).
// Without it, a larger file is sent in parts under that limit, each loaded on
// its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/auth"
	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/server"
)

// maxRows is the API's row limit of one LoadMembers call.
const maxRows = 50_000

// callOverhead is what a call adds to its members' size: the runbook's name,
// the version, gRPC's framing, with room to spare.
const callOverhead = 4 << 10

type config struct {
	gateway, runbook, file string
	version                int
	replace                bool
	timeout                time.Duration
	token, issuerDir       string
	// maxRequestBytes is the gateway's request limit (LUCIUS_MAX_REQUEST_BYTES).
	maxRequestBytes int
}

func main() {
	var cfg config
	e := env.New()
	defaultMax := e.Int("LUCIUS_MAX_REQUEST_BYTES", server.DefaultMaxRequestBytes)
	if err := e.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-members:", err)
		os.Exit(2)
	}
	flag.StringVar(&cfg.gateway, "gateway", "127.0.0.1:9090", "the gateway's gRPC address")
	flag.StringVar(&cfg.runbook, "runbook", "", "the runbook's name (required)")
	flag.IntVar(&cfg.version, "version", 0, "the runbook version to load into; 0: the active version")
	flag.BoolVar(&cfg.replace, "replace", false, "the file is the whole data source: members it lacks are no longer current")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.StringVar(&cfg.token, "token", os.Getenv("LUCIUS_TOKEN"), "an operator's bearer token (default $LUCIUS_TOKEN; else one is minted from -issuer-dir)")
	flag.StringVar(&cfg.issuerDir, "issuer-dir", ".lucius/issuer", "make up's local issuer, to mint an operator token when -token is empty")
	flag.IntVar(&cfg.maxRequestBytes, "max-request-bytes", defaultMax,
		"the gateway's request limit (default: $LUCIUS_MAX_REQUEST_BYTES, as the gateway reads it): each call stays under it")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: lucius-members -runbook <name> [-version n] [-replace] [-gateway host:port] <file.csv | ->")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || cfg.runbook == "" || cfg.version < 0 || cfg.maxRequestBytes <= callOverhead {
		flag.Usage()
		os.Exit(2)
	}
	cfg.file = flag.Arg(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-members:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, stdin io.Reader, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	in := stdin
	if cfg.file != "-" {
		f, err := os.Open(cfg.file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	members, err := runbook.ReadCSV(in)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.file, err)
	}
	maxBytes := cfg.maxRequestBytes
	if maxBytes == 0 {
		maxBytes = server.DefaultMaxRequestBytes
	}
	reqs, err := requests(cfg.runbook, cfg.version, members, cfg.replace, maxBytes)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.file, err)
	}
	if cfg.token == "" {
		issuer, err := auth.OpenLocalIssuer(cfg.issuerDir)
		if err != nil {
			return fmt.Errorf("no -token and no local issuer: %w", err)
		}
		if cfg.token, err = issuer.Mint(auth.Grant{Subject: "lucius-members", Roles: []auth.Role{auth.RoleOperator}}, cfg.timeout+time.Minute); err != nil {
			return err
		}
	}
	conn, err := server.Dial(cfg.gateway, grpc.WithPerRPCCredentials(auth.BearerToken(cfg.token)))
	if err != nil {
		return err
	}
	defer conn.Close()
	total, err := load(ctx, luciusv1.NewRunbookServiceClient(conn), reqs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %d members loaded into %s v%d: %d inserted, %d updated, %d unchanged, %d removed\n",
		cfg.file, len(members), cfg.runbook, total.GetVersion(), total.GetInserted(), total.GetUpdated(),
		total.GetUnchanged(), total.GetRemoved())
	return nil
}

// requests maps members to LoadMembers calls of at most maxBytes encoded:
// one with replace (the file is the whole data source), else as many as the
// call limits require.
func requests(name string, version int, members []runbook.Member, replace bool, maxBytes int) ([]*luciusv1.LoadMembersRequest, error) {
	if replace {
		if len(members) > maxRows {
			return nil, fmt.Errorf("%d members: with -replace the whole file goes in one call, at most %d members", len(members), maxRows)
		}
		req := &luciusv1.LoadMembersRequest{Name: name, Version: int32(version), Replace: true}
		for _, m := range members {
			req.Members = append(req.Members, memberToProto(m))
		}
		if size := proto.Size(req) + callOverhead; size > maxBytes {
			return nil, fmt.Errorf("%d members, %d bytes: with -replace the whole file goes in one call, and the gateway takes "+
				"at most %d bytes a call (its LUCIUS_MAX_REQUEST_BYTES; tell this tool with -max-request-bytes); "+
				"load without -replace (in parts), or raise the gateway's limit", len(members), size, maxBytes)
		}
		return []*luciusv1.LoadMembersRequest{req}, nil
	}
	budget := maxBytes - callOverhead
	var (
		reqs []*luciusv1.LoadMembersRequest
		cur  *luciusv1.LoadMembersRequest
		size int
	)
	for _, m := range members {
		pm := memberToProto(m)
		// A repeated field's element costs its size, a tag and a length.
		n := proto.Size(pm) + 8
		if cur == nil || len(cur.Members) == maxRows || len(cur.Members) > 0 && size+n > budget {
			cur = &luciusv1.LoadMembersRequest{Name: name, Version: int32(version)}
			reqs, size = append(reqs, cur), 0
		}
		cur.Members = append(cur.Members, pm)
		size += n
	}
	if reqs == nil { // an empty file loads nothing, but still names the version
		reqs = append(reqs, &luciusv1.LoadMembersRequest{Name: name, Version: int32(version)})
	}
	return reqs, nil
}

func memberToProto(m runbook.Member) *luciusv1.RunbookMember {
	return &luciusv1.RunbookMember{MemberKey: m.Key, BatchTime: timestamppb.New(m.BatchTime), Values: m.Values}
}

// load sends the calls in order and adds up their counts. The first call
// resolves version 0 to the active version; the others name it, so every
// part lands in the same table even if another version is applied meanwhile.
func load(ctx context.Context, client luciusv1.RunbookServiceClient, reqs []*luciusv1.LoadMembersRequest) (*luciusv1.LoadMembersResponse, error) {
	total := &luciusv1.LoadMembersResponse{}
	offset := 0
	for i, req := range reqs {
		if i > 0 {
			req.Version = total.GetVersion()
		}
		resp, err := client.LoadMembers(ctx, req)
		if err != nil {
			err = describe(err, offset)
			if i > 0 {
				err = fmt.Errorf("%w (the first %d members were loaded)", err, offset)
			}
			return nil, err
		}
		total.Version = resp.GetVersion()
		total.Inserted += resp.GetInserted()
		total.Updated += resp.GetUpdated()
		total.Unchanged += resp.GetUnchanged()
		total.Removed += resp.GetRemoved()
		offset += len(req.GetMembers())
	}
	return total, nil
}

var memberIndex = regexp.MustCompile(`^members\[(\d+)\]`)

// describe renders a gRPC error with its field violations, one a line, the
// member indexes counted from the first member of the file (offset is the
// call's first member).
func describe(err error, offset int) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var lines []string
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			field := memberIndex.ReplaceAllStringFunc(v.GetField(), func(s string) string {
				i, _ := strconv.Atoi(memberIndex.FindStringSubmatch(s)[1])
				return fmt.Sprintf("members[%d]", offset+i)
			})
			lines = append(lines, "  "+field+": "+v.GetDescription())
		}
	}
	if len(lines) == 0 {
		if st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max") {
			// The gateway takes less than -max-request-bytes said.
			return fmt.Errorf("%s: %s: the gateway takes smaller calls than -max-request-bytes says; "+
				"set it to the gateway's LUCIUS_MAX_REQUEST_BYTES", st.Code(), st.Message())
		}
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	// The message repeats the first violation with the call's own index.
	return fmt.Errorf("%s: invalid members:\n%s", st.Code(), strings.Join(lines, "\n"))
}
