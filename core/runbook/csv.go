package runbook

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// CSV header fields before the data columns.
const (
	CSVMemberKey = "member_key"
	CSVBatchTime = "batch_time"
)

// ReadCSV reads member rows: a header "member_key,batch_time,<columns...>",
// then one member per record, batch_time in RFC 3339 (stored in UTC). An
// empty field is an empty value. Errors name the line and the column; every
// problem of the records is reported (up to a limit), in one error.
func ReadCSV(r io.Reader) ([]Member, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("csv: empty; want a header %s,%s,<columns...>", CSVMemberKey, CSVBatchTime)
	}
	if err != nil {
		return nil, csvError(err)
	}
	header = append([]string(nil), header...)
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\uFEFF") // a spreadsheet's byte order mark
	}
	if err := checkHeader(header); err != nil {
		return nil, err
	}
	cr.FieldsPerRecord = len(header)
	var (
		out      []Member
		problems []string
		seen     = map[string]int{}
	)
	for len(problems) <= maxReported {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
			problems = append(problems, fmt.Sprintf("line %d: %d fields, want %d (%s)", pe.StartLine, len(rec), len(header), strings.Join(header, ",")))
			continue
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		at := func(i int) string {
			l, _ := cr.FieldPos(i)
			return fmt.Sprintf("line %d, column %d (%s)", l, i+1, header[i])
		}
		m := Member{Key: rec[0], Values: make(map[string]string, len(header)-2)}
		switch {
		case strings.TrimSpace(m.Key) == "":
			problems = append(problems, at(0)+": the member key is blank")
		case !validText(m.Key):
			problems = append(problems, at(0)+": not UTF-8 text, or a NUL character")
		case utf8.RuneCountInString(m.Key) > MaxMemberKey:
			problems = append(problems, fmt.Sprintf("%s: longer than %d characters", at(0), MaxMemberKey))
		default:
			if first, dup := seen[m.Key]; dup {
				problems = append(problems, fmt.Sprintf("%s: member %q is already on line %d", at(0), m.Key, first))
			}
			seen[m.Key] = line
		}
		if t, err := time.Parse(time.RFC3339, rec[1]); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %q is not an RFC 3339 time such as 2025-03-15T00:00:00Z", at(1), rec[1]))
		} else if problem := batchTimeProblem(t); problem != "" {
			problems = append(problems, at(1)+": "+problem)
		} else {
			m.BatchTime = t.UTC()
		}
		for i := 2; i < len(rec); i++ {
			if !validText(rec[i]) {
				problems = append(problems, at(i)+": not UTF-8 text, or a NUL character")
				continue
			}
			m.Values[header[i]] = rec[i]
		}
		out = append(out, m)
	}
	if len(problems) > 0 {
		if len(problems) > maxReported {
			problems = append(problems[:maxReported], "… and more")
		}
		return nil, fmt.Errorf("csv:\n%s", strings.Join(problems, "\n"))
	}
	return out, nil
}

func checkHeader(header []string) error {
	var problems []string
	if len(header) < 2 || header[0] != CSVMemberKey || header[1] != CSVBatchTime {
		problems = append(problems, fmt.Sprintf("line 1: the header must start with %s,%s (found %q)",
			CSVMemberKey, CSVBatchTime, strings.Join(header[:min(2, len(header))], ",")))
	}
	seen := map[string]int{}
	for i := 2; i < len(header); i++ {
		col := header[i]
		if err := CheckColumn(col); err != nil {
			problems = append(problems, fmt.Sprintf("line 1, column %d: %v", i+1, err))
			continue
		}
		if first, dup := seen[col]; dup {
			problems = append(problems, fmt.Sprintf("line 1, column %d: column %q repeats column %d", i+1, col, first))
			continue
		}
		seen[col] = i + 1
	}
	if len(problems) > 0 {
		return fmt.Errorf("csv header:\n%s", strings.Join(problems, "\n"))
	}
	return nil
}

func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("csv: line %d, column %d: %v", pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("csv: %w", err)
}
