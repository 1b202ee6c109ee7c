package runbook

import (
	"regexp"
	"strings"
	"testing"
)

func TestDataTableName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	tests := []struct {
		name    string
		version int
		want    string
	}{
		{"contoso-mailbox-migration", 3, "runbook_contoso_mailbox_migration_v3"},
		{"r", 1, "runbook_r_v1"},
		{"Contoso Mailbox", 2, "runbook_contoso_mailbox_v2"},
		{"x\"; DROP TABLE jobs; --", 1, "runbook_x___drop_table_jobs_____v1"},
		{"robert'); DROP TABLE students;--", 1, "runbook_robert____drop_table_students____v1"},
		{"müller-straße", 1, "runbook_m_ller_stra_e_v1"},
		{"日本", 1, "runbook____v1"},
		{"", 1, "runbook__v1"},
		{"a", -5, "runbook_a_v_5"},
		{long, 2147483647, "runbook_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_d69f68b6_v2147483647"},
	}
	for _, tt := range tests {
		got := DataTableName(tt.name, tt.version)
		if got != tt.want {
			t.Errorf("DataTableName(%q, %d) = %q, want %q", tt.name, tt.version, got, tt.want)
		}
		if len(got) > 63 || checkDataTable(got) != nil {
			t.Errorf("DataTableName(%q, %d) = %q is not a valid table name", tt.name, tt.version, got)
		}
	}
}

func TestDataTableNameKeepsLongNamesApart(t *testing.T) {
	t.Parallel()
	prefix := strings.Repeat("contoso-", 7) // 56 bytes: the suffix falls in the cut part
	seen := map[string]string{}
	for _, name := range []string{prefix + "a", prefix + "b", prefix + "aa"} {
		for _, v := range []int{1, 2, 1000000} {
			got := DataTableName(name, v)
			if len(got) != 63 {
				t.Errorf("%q v%d → %q (%d bytes), want a cut name of 63", name, v, got, len(got))
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q v%d and %s share table %q", name, v, other, got)
			}
			seen[got] = name
			if DataTableName(name, v) != got {
				t.Errorf("not deterministic for %q", name)
			}
		}
	}
	if n := indexName(DataTableName(prefix+"a", 1)); len(n) > 63 || !strings.HasSuffix(n, "_current_batch") {
		t.Errorf("index name %q", n)
	}
}

func TestIdentifierChecks(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"email", "target_database", "select", "user", "a" + strings.Repeat("b", 62)} {
		if err := CheckColumn(ok); err != nil {
			t.Errorf("CheckColumn(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Email", "_row_id", "9lives", "e-mail", "a b", `x"; DROP TABLE jobs; --`, "a" + strings.Repeat("b", 63), "é"} {
		if CheckColumn(bad) == nil {
			t.Errorf("CheckColumn(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "Contoso", "-a", "a_b", "a" + strings.Repeat("b", 63), `x"; DROP TABLE jobs; --`} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
	if got := quote(`we"ird`); got != `"we""ird"` {
		t.Errorf("quote = %s", got)
	}
	for _, bad := range []string{"jobs", `runbook_x"; drop`, "runbook_" + strings.Repeat("a", 56), "runbook_"} {
		if checkDataTable(bad) == nil {
			t.Errorf("checkDataTable(%q) accepted", bad)
		}
	}
}

var tableNamePattern = regexp.MustCompile(`^runbook_[a-z0-9_]+$`)

// FuzzDataTableName: whatever the input, the name is a plain identifier of
// at most 63 bytes starting runbook_, and valid runbook names never collide
// with one another short of the hash.
func FuzzDataTableName(f *testing.F) {
	f.Add("contoso-mailbox-migration", 3)
	f.Add(`x"; DROP TABLE jobs; --`, 1)
	f.Add(strings.Repeat("ü", 40), -1)
	f.Fuzz(func(t *testing.T, name string, version int) {
		got := DataTableName(name, version)
		if len(got) > 63 || !tableNamePattern.MatchString(got) || checkDataTable(got) != nil {
			t.Fatalf("DataTableName(%q, %d) = %q", name, version, got)
		}
		if n := indexName(got); len(n) > 63 || !tableNamePattern.MatchString(n) {
			t.Fatalf("indexName(%q) = %q", got, n)
		}
		if CheckName(name) == nil && version >= 1 {
			// A valid name maps '-' to '_' and nothing else; a different
			// valid name differs in its table name (or in the hash part).
			other := strings.ReplaceAll(name, "-", "") + "x"
			if CheckName(other) == nil && DataTableName(other, version) == got {
				t.Fatalf("%q and %q share %q", name, other, got)
			}
		}
	})
}
