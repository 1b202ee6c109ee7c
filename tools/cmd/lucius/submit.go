package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func submitCommand(s *session) *cobra.Command {
	var (
		file, payload, mode string
		wait                bool
		c                   luciusv1.Command
		out                 = &formatOrRef{format: &s.format}
	)
	cmd := &cobra.Command{
		Use:   "submit [--file command.yaml] [--type T --tenant T --input REF --output REF --payload JSON] [--wait]",
		Short: "Submit a command; with --wait, follow the job and exit with its outcome",
		Long: `Submit a command envelope (see README's "The command envelope"). The
command comes from --file (JSON or YAML, field names as in the API) and/or
the flags, which override the file's fields. schema_version defaults to 1.
With --wait the job is followed step by step until it ends, and the exit code
says how: 0 SUCCEEDED, 4 FAILED_FINAL, 5 CANCELLED.

--input and --output name the input_ref and output_ref (--input-ref and
--output-ref are the same). Here --output (-o) also keeps its meaning for
every command: table, json or yaml is the output format; anything else is
the output_ref.`,
		Example: `  lucius submit --tenant acme --type OCR_EMBEDDING_SIS --input file:///data/in.pdf \
    --output file:///data/out.json --payload '{"prompt_set":["summarize"]}' --wait
  lucius submit -f command.yaml -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			command := &luciusv1.Command{}
			if file != "" {
				if err := readMessage(file, command); err != nil {
					return &codedError{code: exitUsage, err: err}
				}
			}
			flags := cmd.Flags()
			set := func(name string, dst *string, v string) {
				if flags.Changed(name) {
					*dst = v
				}
			}
			set("tenant", &command.TenantId, c.TenantId)
			set("type", &command.RequestType, c.RequestType)
			set("input-ref", &command.InputRef, c.InputRef)
			set("input", &command.InputRef, c.InputRef)
			set("output-ref", &command.OutputRef, c.OutputRef)
			if out.ref != "" {
				command.OutputRef = out.ref
			}
			set("idempotency-key", &command.IdempotencyKey, c.IdempotencyKey)
			set("correlation-id", &command.CorrelationId, c.CorrelationId)
			set("doc-id", &command.DocId, c.DocId)
			set("callback-url", &command.CallbackUrl, c.CallbackUrl)
			if flags.Changed("priority") {
				command.Priority = c.Priority
			}
			if flags.Changed("mode") {
				v, ok := luciusv1.Mode_value["MODE_"+strings.ToUpper(mode)]
				if !ok {
					return usageErrorf("--mode %q: want default or burst", mode)
				}
				command.Mode = luciusv1.Mode(v)
			}
			if flags.Changed("payload") {
				p := &structpb.Struct{}
				if err := protojson.Unmarshal([]byte(payload), p); err != nil {
					return usageErrorf("--payload: not a JSON object: %v", err)
				}
				command.Payload = p
			}
			if command.Payload == nil {
				command.Payload = &structpb.Struct{}
			}
			if command.SchemaVersion == "" {
				command.SchemaVersion = "1"
			}
			var jobID string
			err := s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewCommandServiceClient(conn).Submit(ctx, &luciusv1.SubmitRequest{Command: command})
				if err != nil {
					return err
				}
				jobID = resp.GetJobId()
				if wait && s.format != formatTable {
					return nil // the job itself is printed when it ends
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "job_id", resp.GetJobId())
					row(t, "status", short(resp.GetStatus(), "JOB_STATUS_"))
					row(t, "duplicate", resp.GetDuplicate())
					if resp.GetAssetId() != "" {
						row(t, "asset", resp.GetAssetId())
						row(t, "revision", resp.GetAssetRevision())
					}
				})
			})
			if err != nil || !wait {
				return err
			}
			return s.follow(cmd, jobID)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "the command as a JSON or YAML file")
	f.StringVar(&c.TenantId, "tenant", "", "tenant_id")
	f.StringVar(&c.RequestType, "type", "", "request_type: the workflow to run")
	f.StringVar(&c.InputRef, "input-ref", "", "input_ref")
	f.StringVar(&c.InputRef, "input", "", "input_ref (the same as --input-ref)")
	f.StringVar(&c.OutputRef, "output-ref", "", "output_ref")
	// --output shadows the root's persistent flag on this command: a format
	// name sets the output format, anything else the output_ref.
	f.VarP(out, "output", "o", "output format (table, json or yaml) or output_ref (a URL)")
	f.StringVar(&payload, "payload", "", "payload, a JSON object")
	f.StringVar(&c.IdempotencyKey, "idempotency-key", "", "idempotency_key")
	f.StringVar(&c.CorrelationId, "correlation-id", "", "correlation_id")
	f.StringVar(&c.DocId, "doc-id", "", "doc_id (BURST mode)")
	f.StringVar(&c.CallbackUrl, "callback-url", "", "callback_url")
	f.StringVar(&mode, "mode", "", "default or burst")
	f.Int32Var(&c.Priority, "priority", 0, "priority, 0 to 10")
	f.BoolVar(&wait, "wait", false, "follow the job until it ends; exit with its outcome")
	return cmd
}

// formatOrRef is submit's --output: the output format when the value names
// one, else the command's output_ref (refs are URLs, never a bare format name).
type formatOrRef struct {
	format *string
	ref    string
}

func (f *formatOrRef) Set(v string) error {
	switch v {
	case formatTable, formatJSON, formatYAML:
		*f.format = v
	default:
		f.ref = v
	}
	return nil
}

func (f *formatOrRef) String() string {
	if f.ref != "" {
		return f.ref
	}
	if f.format == nil {
		return ""
	}
	return *f.format
}

func (f *formatOrRef) Type() string { return "string" }

// readMessage reads a message from a JSON or YAML file, field names as in the API.
func readMessage(path string, into proto.Message) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil { // YAML is a superset of JSON
		return err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(j, into)
}
