// Package layout checks the module layering ARCHITECTURE.md settles: a
// partner's worker imports the SDK, the bus and the contract and nothing of
// the control plane, and the base module stands below everything.
package layout

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/lucius-platform/lucius/"

func TestModulesImportOnlyWhatTheyMay(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		module    string
		forbidden []string // module prefixes its packages (and their tests) must not reach
	}{
		{"base", []string{"core/", "bus", "sdk/", "services/", "tools/"}},
		{"bus", []string{"core/", "sdk/", "services/", "tools/"}},
		{"sdk/worker", []string{"core/", "services/", "tools/"}},
		{"core", []string{"sdk/", "services/", "tools/"}},
		{"services/worker-skeleton", []string{"core/", "services/gateway", "services/orchestrator", "services/reconciler", "services/scheduler", "tools/"}},
	} {
		t.Run(tc.module, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./"+tc.module+"/...")
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list %s: %v", tc.module, err)
			}
			var checked int
			for _, pkg := range strings.Fields(string(out)) {
				rel, ok := strings.CutPrefix(pkg, module)
				if !ok {
					continue
				}
				checked++
				if strings.HasPrefix(rel, tc.module) {
					continue
				}
				for _, f := range tc.forbidden {
					if strings.HasPrefix(rel, f) {
						t.Errorf("%s reaches %s", tc.module, pkg)
					}
				}
			}
			if checked == 0 {
				t.Fatalf("go list %s listed no Lucius package", tc.module)
			}
		})
	}
}
