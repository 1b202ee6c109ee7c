package ledger

import (
	"regexp"
	"sort"
	"testing"
	"time"
)

func TestNewJobIDsAreContractShapedUniqueAndInTimeOrder(t *testing.T) {
	t.Parallel()
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 1000 {
		ids = append(ids, NewJobID(start.Add(time.Duration(i)*time.Nanosecond)))
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids minted at later times do not sort later")
	}
	seen := map[string]bool{}
	for range 1000 {
		id := NewJobID(start) // one instant: the random part tells them apart
		if !hex64.MatchString(id) {
			t.Fatalf("%q is not 64 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("%q minted twice", id)
		}
		seen[id] = true
	}
}
