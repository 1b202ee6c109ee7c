// Command lucius-modproxy writes a Go module proxy directory serving the
// module a tag names (default: the highest contract/v* tag), so a module
// outside the repository can `go get` the tagged contract offline:
//
//	go run ./tools/cmd/lucius-modproxy -out /tmp/goproxy
//	GOPROXY=file:///tmp/goproxy,file://$(go env GOMODCACHE)/cache/download GOSUMDB=off \
//	  go get github.com/lucius-platform/lucius/contract@v0.1.0
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/lucius-platform/lucius/tools/modproxy"
)

func main() {
	repo := flag.String("repo", ".", "the repository holding the tag")
	tag := flag.String("tag", "", "the tag, <module dir>/vX.Y.Z (default: the highest contract/v* tag)")
	out := flag.String("out", "", "the proxy directory to write (GOPROXY=file://<out>)")
	flag.Parse()
	if err := run(*repo, *tag, *out); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-modproxy:", err)
		os.Exit(1)
	}
}

func run(repo, tag, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	ctx := context.Background()
	if tag == "" {
		tags, err := exec.CommandContext(ctx, "git", "-C", repo, "tag", "-l", "contract/v*", "--sort=-v:refname").Output()
		if err != nil || len(strings.Fields(string(tags))) == 0 {
			return fmt.Errorf("no contract/v* tag in %s (%v)", repo, err)
		}
		tag = strings.Fields(string(tags))[0]
	}
	path, version, err := modproxy.Build(ctx, repo, tag, out)
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s in %s\n", path, version, out)
	return nil
}
