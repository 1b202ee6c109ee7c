package runbook

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestReadCSV(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UTC()
	}
	tests := []struct {
		name, in string
		want     []Member
	}{
		{"plain", "member_key,batch_time,email\nann,2025-03-15T00:00:00Z,ann@contoso.com\n",
			[]Member{{Key: "ann", BatchTime: at("2025-03-15T00:00:00Z"), Values: map[string]string{"email": "ann@contoso.com"}}}},
		{"quoted fields keep commas, quotes and newlines", "member_key,batch_time,display_name,note\n" +
			"\"smith, ann\",2025-03-15T00:00:00Z,\"Ann \"\"The Boss\"\" Smith\",\"line one\nline two\"\n",
			[]Member{{Key: "smith, ann", BatchTime: at("2025-03-15T00:00:00Z"),
				Values: map[string]string{"display_name": `Ann "The Boss" Smith`, "note": "line one\nline two"}}}},
		{"offsets become UTC", "member_key,batch_time\nk,2025-03-15T01:30:00.25+01:00\n",
			[]Member{{Key: "k", BatchTime: at("2025-03-15T00:30:00.25Z"), Values: map[string]string{}}}},
		{"empty fields are empty values", "member_key,batch_time,email,site\nk,2025-03-15T00:00:00Z,,x\n",
			[]Member{{Key: "k", BatchTime: at("2025-03-15T00:00:00Z"), Values: map[string]string{"email": "", "site": "x"}}}},
		{"byte order mark and CRLF", "\uFEFFmember_key,batch_time,email\r\nk,2025-03-15T00:00:00Z,e\r\n",
			[]Member{{Key: "k", BatchTime: at("2025-03-15T00:00:00Z"), Values: map[string]string{"email": "e"}}}},
		{"header only", "member_key,batch_time,email\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadCSV(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ReadCSV = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReadCSVRejects(t *testing.T) {
	t.Parallel()
	const hdr = "member_key,batch_time,email\n"
	tests := []struct {
		name, in string
		want     []string
	}{
		{"empty", "", []string{"csv: empty; want a header member_key,batch_time,<columns...>"}},
		{"header without batch_time", "member_key,email\nk,e\n", []string{`line 1: the header must start with member_key,batch_time (found "member_key,email")`}},
		{"header in another order", "batch_time,member_key\n", []string{"the header must start with member_key,batch_time"}},
		{"bad column name", "member_key,batch_time,E-Mail,_is_current\n", []string{
			`line 1, column 3: column "E-Mail" must match`, `line 1, column 4: column "_is_current" must match`}},
		{"repeated column", "member_key,batch_time,email,email\n", []string{`line 1, column 4: column "email" repeats column 3`}},
		{"bad times", hdr + "a,2025-03-15,x\nb,yesterday,x\nc,0001-01-01T00:00:00+01:00,x\n", []string{
			`line 2, column 2 (batch_time): "2025-03-15" is not an RFC 3339 time such as 2025-03-15T00:00:00Z`,
			`line 3, column 2 (batch_time): "yesterday" is not an RFC 3339 time`,
			`line 4, column 2 (batch_time): batch_time 0000-12-31T23:00:00Z is out of range`}},
		{"zero time", hdr + "a,0001-01-01T00:00:00Z,x\n", []string{"line 2, column 2 (batch_time): batch_time is missing"}},
		{"ragged rows", hdr + "a,2025-03-15T00:00:00Z\nb,2025-03-15T00:00:00Z,x,y\nc,2025-03-15T00:00:00Z,x\n", []string{
			"line 2: 2 fields, want 3 (member_key,batch_time,email)", "line 3: 4 fields, want 3"}},
		{"blank and repeated keys", hdr + " ,2025-03-15T00:00:00Z,x\nk,2025-03-15T00:00:00Z,x\nk,2025-03-15T00:00:00Z,y\n", []string{
			"line 2, column 1 (member_key): the member key is blank", `line 4, column 1 (member_key): member "k" is already on line 3`}},
		{"key too long", hdr + strings.Repeat("k", 257) + ",2025-03-15T00:00:00Z,x\n", []string{"line 2, column 1 (member_key): longer than 256 characters"}},
		{"not UTF-8", hdr + "k,2025-03-15T00:00:00Z,caf\xe9\n", []string{"line 2, column 3 (email): not UTF-8 text, or a NUL character"}},
		{"bare quote", hdr + "k,2025-03-15T00:00:00Z,say \"hi\"\n", []string{`csv: line 2, column 28: bare " in non-quoted-field`}},
		{"unterminated quote", hdr + "k,2025-03-15T00:00:00Z,\"open\n", []string{`csv: line 2, column`, `extraneous or missing " in quoted-field`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadCSV(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// FuzzReadCSV: no input panics ReadCSV, and accepted rows satisfy what
// LoadMembers demands of them (its own checks pass).
func FuzzReadCSV(f *testing.F) {
	f.Add("member_key,batch_time,email\nann,2025-03-15T00:00:00Z,ann@contoso.com\n")
	f.Add("member_key,batch_time,a,b\n\"x,y\",2025-03-15T00:00:00.5+02:00,\"q\"\"\",\n")
	f.Add("member_key,batch_time\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "csv") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		columns := map[string]bool{}
		var cols []string
		for _, m := range rows {
			if m.BatchTime.Location() != time.UTC || !utf8.ValidString(m.Key) {
				t.Fatalf("row %+v", m)
			}
			for c := range m.Values {
				if !columns[c] {
					columns[c] = true
					cols = append(cols, c)
				}
			}
		}
		if err := CheckMembers(rows, cols); err != nil {
			t.Fatalf("ReadCSV accepted rows LoadMembers refuses: %v", err)
		}
	})
}
