package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/tools/modproxy"
)

const contractModule = "github.com/lucius-platform/lucius/contract"

// partnerProgram is a partner's program in its own module: it knows Lucius
// only through the tagged contract module.
const partnerProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// bearer sends the token with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func main() {
	conn, err := grpc.NewClient(os.Getenv("LUCIUS_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(os.Getenv("LUCIUS_TOKEN"))))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := luciusv1.NewCommandServiceClient(conn).Submit(ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{
		TenantId: "acme", RequestType: "E2E_MANUAL", SchemaVersion: "1",
		InputRef: os.Getenv("LUCIUS_INPUT_REF"), OutputRef: os.Getenv("LUCIUS_OUTPUT_REF"), Payload: &structpb.Struct{}}})
	if err != nil {
		panic(err)
	}
	got, err := luciusv1.NewJobServiceClient(conn).GetJob(ctx, &luciusv1.GetJobRequest{JobId: sub.GetJobId()})
	if err != nil {
		panic(err)
	}
	fmt.Println(sub.GetJobId(), got.GetJob().GetTenantId())
}
`

// A module outside the repository gets the tagged contract (the highest
// contract/vX.Y.Z tag; without one, a tag made in a temporary clone) from a
// local GOPROXY=file:// built from that tag (package modproxy), builds a program with its
// generated gRPC client, and calls the suite with it. Offline: every other
// module comes from the local module cache (GOPROXY=file://…/cache/download),
// and GOSUMDB is off as no checksum database knows a local proxy's module.
func TestOutsideModuleCallsTheSuiteWithTheTaggedContract(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	repo, tag := taggedContract(t, root)
	proxy := filepath.Join(t.TempDir(), "proxy")
	_, version, err := modproxy.Build(ctx, repo, tag, proxy)
	if err != nil {
		t.Fatal(err)
	}
	s := startSuite(t, suiteOptions{})

	scratch := t.TempDir()
	if strings.HasPrefix(scratch, root) {
		t.Fatalf("the scratch module %s is inside the repository", scratch)
	}
	for name, body := range map[string]string{"go.mod": "module example.com/partner\n\ngo 1.26.0\n", "main.go": partnerProgram} {
		if err := os.WriteFile(filepath.Join(scratch, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gomodcache := goEnv(t, "GOMODCACHE")
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw", "GOTOOLCHAIN=local", "GOSUMDB=off",
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(gomodcache, "cache", "download"),
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache")) // no made-up version in the shared cache
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = scratch, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	goCmd("get", contractModule+"@"+version)
	goCmd("mod", "tidy")
	goCmd("build", "-o", "partner", ".")
	modFile, _ := os.ReadFile(filepath.Join(scratch, "go.mod"))
	if !strings.Contains(string(modFile), contractModule+" "+version) {
		t.Fatalf("go.mod does not require %s %s:\n%s", contractModule, version, modFile)
	}

	input := s.input("outside.txt", "from another module\n")
	output, _ := s.output("outside.json")
	cmd := exec.CommandContext(ctx, filepath.Join(scratch, "partner"))
	cmd.Env = append(os.Environ(), "LUCIUS_ADDR="+s.Endpoints.GatewayGRPC, "LUCIUS_TOKEN="+s.partner("acme"),
		"LUCIUS_INPUT_REF="+input, "LUCIUS_OUTPUT_REF="+output)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("partner: %v\n%s", err, out)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 || fields[1] != "acme" {
		t.Fatalf("partner printed %q", out)
	}
	if _, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: fields[0]}); err != nil {
		t.Fatalf("the partner's job %s: %v", fields[0], err)
	}
}

// taggedContract returns a repository and the highest contract/v* tag in it:
// root's, or, when root has none (a shallow clone), a temporary clone's
// where HEAD is tagged with contract/VERSION.
func taggedContract(t *testing.T, root string) (string, string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "tag", "-l", "contract/v*", "--sort=-v:refname").Output()
	if err != nil {
		t.Fatalf("git tag: %v", err)
	}
	if tags := strings.Fields(string(out)); len(tags) > 0 {
		return root, tags[0]
	}
	version, err := os.ReadFile(filepath.Join(root, "contract", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	tag := "contract/v" + strings.TrimSpace(string(version))
	for _, args := range [][]string{{"clone", "--quiet", root, clone}, {"-C", clone, "tag", tag}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return clone, tag
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(out))
}
