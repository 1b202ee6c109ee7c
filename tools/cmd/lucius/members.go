package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spf13/cobra"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/runbook"
)

// maxRows is the API's row limit of one LoadMembers call.
const maxRows = 50_000

// callOverhead is what a call adds to its members' size: the runbook's name,
// the version, gRPC's framing, with room to spare.
const callOverhead = 4 << 10

// membersCommand loads a runbook's member data from a CSV file through
// RunbookService.LoadMembers.
//
// The file has a header "member_key,batch_time,<columns...>" and one member a
// line, batch_time in RFC 3339 (2025-03-15T00:00:00Z); see runbook.ReadCSV.
// With --replace the file is the whole data source: the members it lacks are
// no longer current, so it is sent in one call (at most 50,000 members and
// the gateway's request limit, LUCIUS_MAX_REQUEST_BYTES, 1 MiB by default:
// some 7,000 typical rows; --max-request-bytes, by default that variable,
// says what the gateway takes). Without it, a larger file is sent in parts
// under that limit, each loaded on its own.
func membersCommand(s *session) *cobra.Command {
	members := &cobra.Command{Use: "members", Short: "Load a runbook's member data (operators)"}
	var o membersLoad
	e := env.New()
	load := &cobra.Command{
		Use:   "load RUNBOOK FILE.csv|-",
		Short: "Load members from a CSV file (or - for stdin)",
		Long: `Load a runbook's members from a CSV file: a header "member_key,batch_time,<columns...>"
and one member a line, batch_time in RFC 3339. With --replace the file is the
whole data source (members it lacks are no longer current) and goes in one
call; without it a large file is sent in parts under the gateway's request
limit.`,
		Example: `  lucius members load contoso-mailbox-migration members.csv --replace
  export-members | lucius members load contoso-mailbox-migration -`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := e.Err(); err != nil { // a malformed LUCIUS_MAX_REQUEST_BYTES is not silently the default
				return &codedError{code: exitUsage, err: err}
			}
			o.runbook, o.file = args[0], args[1]
			if o.version < 0 || o.maxRequestBytes <= callOverhead {
				return usageErrorf("--version must not be negative and --max-request-bytes above %d", callOverhead)
			}
			reqs, count, err := o.requests(cmd.InOrStdin())
			if err != nil {
				return &codedError{code: exitUsage, err: err}
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				total, err := load(ctx, luciusv1.NewRunbookServiceClient(conn), reqs)
				if err != nil {
					return err
				}
				return s.printer(cmd).print(total, func(t *tabwriter.Writer) {
					fmt.Fprintf(t, "%s: %d members loaded into %s v%d: %d inserted, %d updated, %d unchanged, %d removed\n",
						o.file, count, o.runbook, total.GetVersion(), total.GetInserted(), total.GetUpdated(),
						total.GetUnchanged(), total.GetRemoved())
				})
			})
		},
	}
	load.Flags().IntVar(&o.version, "version", 0, "the runbook version to load into; 0: the active version")
	load.Flags().BoolVar(&o.replace, "replace", false, "the file is the whole data source: members it lacks are no longer current")
	load.Flags().IntVar(&o.maxRequestBytes, "max-request-bytes", e.Int("LUCIUS_MAX_REQUEST_BYTES", server.DefaultMaxRequestBytes),
		"the gateway's request limit (default: $LUCIUS_MAX_REQUEST_BYTES, as the gateway reads it): each call stays under it")
	members.AddCommand(load)
	return members
}

// membersLoad is one load's settings.
type membersLoad struct {
	runbook, file   string
	version         int
	replace         bool
	maxRequestBytes int
}

// requests reads the file (stdin for -) and maps it to calls; it returns
// them and how many members the file held.
func (o membersLoad) requests(stdin io.Reader) ([]*luciusv1.LoadMembersRequest, int, error) {
	in := stdin
	if o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close() //nolint:errcheck // opened for reading
		in = f
	}
	members, err := runbook.ReadCSV(in)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", o.file, err)
	}
	reqs, err := requests(o.runbook, o.version, members, o.replace, o.maxRequestBytes)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", o.file, err)
	}
	return reqs, len(members), nil
}

// requests maps members to LoadMembers calls of at most maxBytes encoded:
// one with replace (the file is the whole data source), else as many as the
// call limits require.
func requests(name string, version int, members []runbook.Member, replace bool, maxBytes int) ([]*luciusv1.LoadMembersRequest, error) {
	if replace {
		if len(members) > maxRows {
			return nil, fmt.Errorf("%d members: with --replace the whole file goes in one call, at most %d members", len(members), maxRows)
		}
		req := &luciusv1.LoadMembersRequest{Name: name, Version: int32(version), Replace: true}
		for _, m := range members {
			req.Members = append(req.Members, memberToProto(m))
		}
		if size := proto.Size(req) + callOverhead; size > maxBytes {
			return nil, fmt.Errorf("%d members, %d bytes: with --replace the whole file goes in one call, and the gateway takes "+
				"at most %d bytes a call (its LUCIUS_MAX_REQUEST_BYTES; tell this tool with --max-request-bytes); "+
				"load without --replace (in parts), or raise the gateway's limit", len(members), size, maxBytes)
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
			code := exitCode(err) // kept through the rewording
			err = describeMembers(err, offset)
			if i > 0 {
				err = fmt.Errorf("%w (the first %d members were loaded)", err, offset)
			}
			return nil, &codedError{code: code, err: err}
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

// describeMembers renders a gRPC error with its field violations, one a line, the
// member indexes counted from the first member of the file (offset is the
// call's first member).
func describeMembers(err error, offset int) error {
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
			// The gateway takes less than --max-request-bytes said.
			return fmt.Errorf("%s: %s: the gateway takes smaller calls than --max-request-bytes says; "+
				"set it to the gateway's LUCIUS_MAX_REQUEST_BYTES", st.Code(), st.Message())
		}
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	// The message repeats the first violation with the call's own index.
	return fmt.Errorf("%s: invalid members:\n%s", st.Code(), strings.Join(lines, "\n"))
}
