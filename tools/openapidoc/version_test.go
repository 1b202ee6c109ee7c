package openapidoc

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
)

// contract/VERSION, the source of info.version, is a semantic version with
// a CHANGELOG entry; it is ahead of the last contract/vX.Y.Z tag, or equal
// to it only while proto/ is what that tag holds (a change to the contract
// bumps the version).
func TestContractVersionMovesAheadOfItsLastTag(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../contract/VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := "v" + strings.TrimSpace(string(raw))
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		t.Fatalf("contract/VERSION %q is not a semantic version X.Y.Z", raw)
	}
	changelog, err := os.ReadFile("../../contract/CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "\n## "+version[1:]+" ") {
		t.Errorf("contract/CHANGELOG.md has no section \"## %s …\"", version[1:])
	}
	out, err := exec.Command("git", "tag", "-l", "contract/v*", "--sort=-v:refname").Output()
	tags := strings.Fields(string(out))
	if err != nil || len(tags) == 0 {
		t.Logf("no contract/v* tag to compare with (git: %v)", err)
		return
	}
	last := strings.TrimPrefix(tags[0], "contract/")
	switch c := semver.Compare(version, last); {
	case c < 0:
		t.Errorf("contract/VERSION %s is behind the last tag %s", version, tags[0])
	case c == 0:
		if err := exec.Command("git", "diff", "--quiet", tags[0], "--", "../../proto").Run(); err != nil {
			t.Errorf("proto/ changed since %s but contract/VERSION is still %s: bump it and add a CHANGELOG entry", tags[0], version)
		}
	}
}
