package runbook

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// maxIdentifier is PostgreSQL's identifier length (NAMEDATALEN - 1 bytes);
// longer names are silently truncated by the server, so we never send one.
const maxIdentifier = 63

// dataTablePattern is what DataTableName produces; table names read back
// from the runbooks table are checked against it before use in SQL.
var dataTablePattern = regexp.MustCompile(`^runbook_[a-z0-9_]{1,55}$`)

// DataTableName is the member table of a runbook version:
// runbook_{name}_v{version}, lowercased, every character outside [a-z0-9_]
// replaced by '_'. A name longer than PostgreSQL's 63 bytes is cut and given
// an 8-hex-digit hash of the full name before _v{version}, so distinct long
// names stay distinct.
// For valid runbook names (lowercase letters, digits, '-') the mapping is
// one-to-one up to a hash collision, which Apply refuses (the column is unique).
func DataTableName(name string, version int) string {
	// The version stays visible at the end even when the name is cut.
	return fitIdentifier(sanitize("runbook_"+name), sanitize("_v"+strconv.Itoa(version)))
}

// sanitize lowercases s and maps every rune outside [a-z0-9_] to '_'.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// fitIdentifier returns base+suffix when it fits in 63 bytes; otherwise it
// cuts base and inserts '_' and 8 hex digits of the hash of base+suffix.
// base and suffix must be ASCII (sanitized).
func fitIdentifier(base, suffix string) string {
	if len(base)+len(suffix) <= maxIdentifier {
		return base + suffix
	}
	sum := sha256.Sum256([]byte(base + suffix))
	tag := "_" + hex.EncodeToString(sum[:4])
	return base[:maxIdentifier-len(tag)-len(suffix)] + tag + suffix
}

// indexName names the member table's batch-time index, within 63 bytes.
func indexName(table string) string { return fitIdentifier(table, "_current_batch") }

// CheckName reports whether name is a valid runbook name.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("runbook name %q must match %s", name, namePattern)
	}
	return nil
}

// CheckColumn reports whether col is a valid data column name.
func CheckColumn(col string) error {
	if !columnPattern.MatchString(col) {
		return fmt.Errorf("column %q must match %s", col, columnPattern)
	}
	return nil
}

// checkDataTable guards table names that come back from the database before
// they are spliced (quoted) into SQL.
func checkDataTable(table string) error {
	if !dataTablePattern.MatchString(table) {
		return fmt.Errorf("member table %q is not a runbook data table name", table)
	}
	return nil
}

// quote quotes one identifier for SQL. Every identifier we build from input
// is also validated first; quoting keeps reserved words (a column "user" or
// "select") working and is the second line of defence.
func quote(ident string) string { return pgx.Identifier{ident}.Sanitize() }
