package env

import (
	"strings"
	"testing"
	"time"
)

func TestReaderCollectsEveryProblem(t *testing.T) {
	t.Parallel()
	r := FromMap(map[string]string{"N": "12", "D": "3s", "B": "true", "L": " a, ,b ", "BADN": "x", "BADD": "soon", "BLANK": "  "})
	if r.Int("N", 0) != 12 || r.Duration("D", 0) != 3*time.Second || !r.Bool("B", false) {
		t.Fatal("typed values not read")
	}
	if got := strings.Join(r.List("L", nil), "|"); got != "a|b" {
		t.Fatalf("List = %q", got)
	}
	if r.String("BLANK", "def") != "def" || r.Int("MISSING", 7) != 7 {
		t.Fatal("defaults not applied to blank or missing values")
	}
	r.Int("BADN", 0)
	r.Duration("BADD", 0)
	r.Required("NOPE")
	err := r.Err()
	for _, want := range []string{"BADN", "BADD", "NOPE is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not mention %s", err, want)
		}
	}
}
