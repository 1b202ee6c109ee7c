package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Output formats of --output.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// printer writes answers in the --output format: the API's own JSON
// (protojson, field names as in the contract), the same as YAML, or a
// table made for people.
type printer struct {
	format string
	out    io.Writer
}

func (p printer) check() error {
	switch p.format {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return usageErrorf("--output %q: want table, json or yaml", p.format)
}

// marshal is msg in the API's JSON (proto field names).
func marshal(msg proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
}

// streamed prints one message of a stream: a compact JSON line (NDJSON), a
// YAML document, or the table's rows.
func (p printer) streamed(msg proto.Message, table func(t *tabwriter.Writer)) error {
	switch p.format {
	case formatJSON:
		b, err := marshal(msg)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := json.Compact(&out, b); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err = out.WriteTo(p.out)
		return err
	case formatYAML:
		if _, err := io.WriteString(p.out, "---\n"); err != nil {
			return err
		}
	}
	return p.print(msg, table)
}

// print writes msg; table draws it for --output table.
func (p printer) print(msg proto.Message, table func(t *tabwriter.Writer)) error {
	switch p.format {
	case formatJSON, formatYAML:
		b, err := marshal(msg)
		if err != nil {
			return err
		}
		if p.format == formatJSON {
			// protojson varies its whitespace on purpose; scripts get a stable layout.
			var out bytes.Buffer
			if err := json.Indent(&out, b, "", "  "); err != nil {
				return err
			}
			out.WriteByte('\n')
			_, err = out.WriteTo(p.out)
			return err
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		y, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = p.out.Write(y)
		return err
	}
	t := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	table(t)
	return t.Flush()
}

// row writes tab-separated cells.
func row(t *tabwriter.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t, strings.Join(parts, "\t"))
}

// when formats a timestamp for tables ("-" when unset).
func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().Local().Format(time.DateTime)
}

// short strips an enum's type prefix: JOB_STATUS_SUCCEEDED → SUCCEEDED.
func short(enum fmt.Stringer, prefix string) string {
	return strings.TrimPrefix(enum.String(), prefix)
}

// describe renders a failed call for people: the status, its ErrorInfo
// reason and each field violation.
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			fmt.Fprintf(&b, " [%s]", d.GetReason())
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  %s: %s", v.GetField(), v.GetDescription())
			}
		}
	}
	return b.String()
}
