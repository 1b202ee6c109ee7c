package check

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// repoRoot is the repository, from this package's folder.
const repoRoot = "../.."

// devOnly are the binaries `make build` makes for a developer's machine
// only, with why the image leaves each out.
var devOnly = map[string]string{
	"lucius-up":    "runs a whole suite of local processes with its own PostgreSQL (make up)",
	"lucius-bench": "the local benchmark: starts its own suite",
	"lucius-chaos": "the local chaos run: starts, kills and restarts its own suite",
	"withpg":       "starts a throwaway local PostgreSQL for tests",
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	makeServices  = regexp.MustCompile(`(?m)^SERVICES\s*:=\s*(.+)$`)
	makeOutput    = regexp.MustCompile(`-o \$\(BIN\)/([a-z0-9$-]+)`)
	dockerLoop    = regexp.MustCompile(`for s in ([a-z0-9 -]+); do`)
	dockerOutput  = regexp.MustCompile(`-o /out/([a-z0-9$-]+)`)
	dockerFrom    = regexp.MustCompile(`(?m)^FROM\s+(\S+)`)
	goWorkUse     = regexp.MustCompile(`(?m)^\s+\./(\S+)$`)
	stackWorkers  = regexp.MustCompile(`cfg\.Workers = \[\]string\{([^}]*)\}`)
	dockerIgnored = []string{".git", ".build", ".lucius", "**/node_modules"}
)

// builtBy lists the binaries a build recipe writes: named outputs, and the
// names a loop over $(SERVICES) or "for s in …" builds.
func builtBy(text string, out *regexp.Regexp, loopNames []string) []string {
	var names []string
	for _, m := range out.FindAllStringSubmatch(text, -1) {
		if strings.Contains(m[1], "$") {
			names = append(names, loopNames...)
			continue
		}
		names = append(names, m[1])
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func makeBinaries(t *testing.T) []string {
	t.Helper()
	mk := read(t, "Makefile")
	services := makeServices.FindStringSubmatch(mk)
	start := strings.Index(mk, "\nbuild:")
	if services == nil || start < 0 {
		t.Fatal("Makefile: no SERVICES or build target")
	}
	recipe := mk[start+1:]
	if end := strings.Index(recipe, "\n\n"); end > 0 {
		recipe = recipe[:end]
	}
	return builtBy(recipe, makeOutput, strings.Fields(services[1]))
}

func dockerBinaries(t *testing.T, df string) []string {
	t.Helper()
	var loop []string
	if m := dockerLoop.FindStringSubmatch(df); m != nil {
		loop = strings.Fields(m[1])
	}
	return builtBy(df, dockerOutput, loop)
}

// The image builds every binary `make build` ships (all but the local
// development tools, each left out for a reason), statically, into a
// distroless non-root final stage with the OCI labels, and copies every
// workspace module's go.mod before the sources.
func TestDockerfileBuildsEveryShippedBinary(t *testing.T) {
	t.Parallel()
	df := read(t, "Dockerfile")
	built := dockerBinaries(t, df)
	mk := makeBinaries(t)
	if len(mk) < 5 {
		t.Fatalf("the Makefile's build target makes %v: the parser lost track", mk)
	}
	for _, b := range mk {
		if _, dev := devOnly[b]; !dev && !slices.Contains(built, b) {
			t.Errorf("make build makes %s, the Dockerfile does not build it (or list it in devOnly with a reason)", b)
		}
	}
	for b := range devOnly {
		if !slices.Contains(mk, b) {
			t.Errorf("devOnly names %s, which make build no longer makes", b)
		}
		if slices.Contains(built, b) {
			t.Errorf("the Dockerfile builds %s, a development tool", b)
		}
	}
	for _, b := range built {
		if !slices.Contains(mk, b) {
			t.Errorf("the Dockerfile builds %s, which make build does not", b)
		}
	}
	if !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("the Dockerfile does not build with CGO_ENABLED=0")
	}
	froms := dockerFrom.FindAllStringSubmatch(df, -1)
	if len(froms) < 2 || froms[len(froms)-1][1] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage %v, want gcr.io/distroless/static-debian12:nonroot", froms)
	}
	final := df[strings.LastIndex(df, "\nFROM "):]
	if !regexp.MustCompile(`(?m)^USER (65532|nonroot)`).MatchString(final) {
		t.Error("the final stage does not run as the non-root user")
	}
	for _, label := range []string{"title", "description", "source", "version", "revision", "created"} {
		if !strings.Contains(final, "org.opencontainers.image."+label+"=") {
			t.Errorf("the image has no org.opencontainers.image.%s label", label)
		}
	}
	for _, m := range goWorkUse.FindAllStringSubmatch(read(t, "go.work"), -1) {
		if !strings.Contains(df, "COPY "+m[1]+"/go.mod "+m[1]+"/go.sum "+m[1]+"/") {
			t.Errorf("the Dockerfile does not copy %s/go.mod before the sources", m[1])
		}
	}
	ignore := strings.Split(read(t, ".dockerignore"), "\n")
	for _, p := range dockerIgnored {
		if !slices.Contains(ignore, p) {
			t.Errorf(".dockerignore does not leave out %s", p)
		}
	}
}

// composeFile is what the test reads of docker-compose.yml.
type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Command     []string          `json:"command"`
		Environment map[string]string `json:"environment"`
		Healthcheck struct {
			Test []string `json:"test"`
		} `json:"healthcheck"`
	} `json:"services"`
}

// docker-compose.yml runs the image's binaries with a healthcheck each (the
// binary's own healthcheck command) and the worker pools `make up` runs,
// with the trust make up gives them: the trust service's issuer for every
// process, its callback keys for the orchestrators and the reconciler, and
// a token it mints for each worker pool.
func TestComposeRunsTheImagesBinariesAndMakeUpsWorkers(t *testing.T) {
	t.Parallel()
	var c composeFile
	if err := yaml.Unmarshal([]byte(read(t, "docker-compose.yml")), &c); err != nil {
		t.Fatal(err)
	}
	built := dockerBinaries(t, read(t, "Dockerfile"))
	var pools []string
	for name, s := range c.Services {
		if s.Image != "lucius:dev" {
			continue
		}
		if len(s.Command) == 0 || !slices.Contains(built, s.Command[0]) {
			t.Errorf("compose service %s runs %v, not a binary of the image", name, s.Command)
			continue
		}
		if len(s.Command) == 1 && !slices.Equal(s.Healthcheck.Test, []string{"CMD", s.Command[0], "healthcheck"}) {
			t.Errorf("compose service %s: healthcheck %v, want [CMD %s healthcheck]", name, s.Healthcheck.Test, s.Command[0])
		}
		if len(s.Command) > 1 {
			continue // the trust service, checked below
		}
		if s.Environment["LUCIUS_AUTH_JWKS_FILE"] != "/var/lib/lucius/issuer/jwks.json" {
			t.Errorf("compose service %s does not trust the trust service's issuer", name)
		}
		switch s.Command[0] {
		case "orchestrator", "reconciler":
			if s.Environment["LUCIUS_CALLBACK_KEYS_FILE"] != "/var/lib/lucius/secrets/callback-keys" {
				t.Errorf("compose service %s has no callback keys", name)
			}
		case "worker":
			pool := s.Environment["LUCIUS_WORKER_SERVICE"]
			pools = append(pools, pool)
			if want := "/var/lib/lucius/tokens/" + strings.ReplaceAll(pool, ",", "-") + ".jwt"; s.Environment["LUCIUS_AUTH_TOKEN_FILE"] != want {
				t.Errorf("compose service %s: token file %q, want %q", name, s.Environment["LUCIUS_AUTH_TOKEN_FILE"], want)
			}
		}
	}
	trust := c.Services["trust"].Command
	var minted []string
	for i, arg := range trust {
		if arg == "--worker" && i+1 < len(trust) {
			minted = append(minted, trust[i+1])
		}
	}
	if len(trust) < 3 || !slices.Equal(trust[:3], []string{"lucius", "trust", "/var/lib/lucius"}) {
		t.Errorf("the trust service runs %v", trust)
	}
	slices.Sort(minted)
	m := stackWorkers.FindStringSubmatch(read(t, "tools/stack/stack.go"))
	if m == nil {
		t.Fatal("tools/stack: no default workers")
	}
	want := stringList(m[1])
	slices.Sort(pools)
	slices.Sort(want)
	if !slices.Equal(pools, want) {
		t.Errorf("compose runs worker pools %q, make up runs %q", pools, want)
	}
	if !slices.Equal(minted, pools) {
		t.Errorf("the trust service mints tokens for %q, compose runs pools %q", minted, pools)
	}
}

// stringList reads the elements of a Go string list literal.
func stringList(list string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(list, -1) {
		out = append(out, m[1])
	}
	return out
}
