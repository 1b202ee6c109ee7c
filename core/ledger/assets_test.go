package ledger_test

import (
	"testing"

	"github.com/lucius-platform/lucius/core/ledger"
)

// Golden asset ids, computed independently (Python's hashlib and json with
// sort_keys and compact separators) from seed 001's example.
func TestAssetIDOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string
		refs map[string]string
		want string
	}{
		{"seed 001's example", "ddh", map[string]string{"dataset_id": "boundaries", "resource_id": "shapefile", "version_id": "2025-01"},
			"4218f084c0a346aefa4b804ab877b5ce"},
		{"the same refs in another order", "ddh", map[string]string{"version_id": "2025-01", "resource_id": "shapefile", "dataset_id": "boundaries"},
			"4218f084c0a346aefa4b804ab877b5ce"},
		{"no refs", "ddh", nil, "ad640ff6ff57521c232b2a52444c9556"},
		{"no refs, empty map", "ddh", map[string]string{}, "ad640ff6ff57521c232b2a52444c9556"},
		{"HTML characters and non-ASCII kept as they are", "geo", map[string]string{"path": "a<b&c>", "name": "Zürich"},
			"fca3602b1be74c495256aafc7426a7e8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ledger.AssetIDOf(tc.id, tc.refs); got != tc.want {
				t.Fatalf("AssetIDOf = %s, want %s", got, tc.want)
			}
		})
	}
	if ledger.AssetIDOf("ddh", map[string]string{"version_id": "2025-02"}) == ledger.AssetIDOf("ddh", map[string]string{"version_id": "2025-01"}) {
		t.Fatal("another version_id names the same asset")
	}
}
