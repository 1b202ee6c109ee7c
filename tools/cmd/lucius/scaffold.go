package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"text/template"
	"unicode"

	"github.com/spf13/cobra"
)

// The scaffold's templates: a standalone module that imports the worker SDK.
//
//go:embed scaffold/*.tmpl
var scaffoldFS embed.FS

// sdkVersion is the tag of the contract and SDK modules a scaffold requires.
const sdkVersion = "v0.1.0"

// sdkModules are the Lucius modules a worker builds against: the SDK and the
// contract it imports, and the bus and base modules the SDK imports. An
// offline scaffold replaces each with its folder in a local checkout.
var sdkModules = []string{"sdk/worker", "contract", "bus", "base"}

var (
	serviceNamePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	handlerNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,127}$`)
)

// scaffold is what the templates fill in.
type scaffold struct {
	Name, Module, Version, WorkflowID, HandlerList string
	Handlers                                       []scaffoldHandler
	Source                                         string // a local Lucius checkout; "": the published modules
	Replaces                                       []struct{ Module, Dir string }
}

type scaffoldHandler struct {
	Name, Func, Lower, File, TestFile, Node, Next string
}

func newScaffold(name string, handlers []string, module, source string) (*scaffold, error) {
	var errs []error
	if !serviceNamePattern.MatchString(name) {
		errs = append(errs, fmt.Errorf("worker name %q: want a service name, lowercase letters, digits and '-', starting with a letter", name))
	}
	if len(handlers) == 0 {
		errs = append(errs, errors.New("--handlers: name at least one handler (the step types the worker serves, e.g. OCR)"))
	}
	s := &scaffold{Name: name, Module: module, Version: sdkVersion, Source: source,
		WorkflowID: strings.ReplaceAll(name, "-", "_"), HandlerList: strings.Join(handlers, ", ")}
	if s.Module == "" {
		s.Module = name
	}
	seen := map[string]bool{}
	for i, h := range handlers {
		if !handlerNamePattern.MatchString(h) {
			errs = append(errs, fmt.Errorf("handler %q: want letters, digits and '_', starting with a letter (at most 128)", h))
			continue
		}
		lower := strings.ToLower(h)
		if seen[lower] {
			errs = append(errs, fmt.Errorf("handler %q is listed twice (names must differ in more than case)", h))
			continue
		}
		seen[lower] = true
		next := "END"
		if i+1 < len(handlers) {
			next = "step_" + strings.ToLower(handlers[i+1])
		}
		s.Handlers = append(s.Handlers, scaffoldHandler{Name: h, Func: goName(h), Lower: lower,
			File: lower + ".go", TestFile: lower + "_test.go", Node: "step_" + lower, Next: next})
	}
	if source != "" {
		for _, m := range sdkModules {
			s.Replaces = append(s.Replaces, struct{ Module, Dir string }{m, filepath.Join(source, m)})
		}
	}
	return s, errors.Join(errs...)
}

// goName turns a handler name into an exported Go identifier: OCR → Ocr,
// raster_validate → RasterValidate.
func goName(h string) string {
	var b strings.Builder
	for _, part := range strings.Split(h, "_") {
		if part == "" {
			continue
		}
		r := []rune(strings.ToLower(part))
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String()
}

// write renders every file into dir, which must not exist or be empty.
func (s *scaffold) write(dir string) ([]string, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s exists and is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	type file struct {
		tmpl, name string
		data       any
	}
	files := []file{{"go.mod", "go.mod", s}, {"main.go", "main.go", s}, {"workflow.yaml", "workflow.yaml", s},
		{"Dockerfile", "Dockerfile", s}, {"README.md", "README.md", s}}
	for _, h := range s.Handlers {
		files = append(files, file{"handler.go", h.File, h}, file{"handler_test.go", h.TestFile, h})
	}
	tmpl, err := template.ParseFS(scaffoldFS, "scaffold/*.tmpl")
	if err != nil {
		return nil, err
	}
	var written []string
	for _, f := range files {
		var buf bytes.Buffer
		if err := tmpl.ExecuteTemplate(&buf, f.tmpl+".tmpl", f.data); err != nil {
			return nil, fmt.Errorf("render %s: %w", f.name, err)
		}
		out := buf.Bytes()
		if strings.HasSuffix(f.name, ".go") {
			if out, err = format.Source(out); err != nil {
				return nil, fmt.Errorf("render %s: %w", f.name, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), out, 0o644); err != nil {
			return nil, err
		}
		written = append(written, f.name)
	}
	return written, nil
}

// findCheckout finds a Lucius checkout holding the SDK: $LUCIUS_SOURCE_DIR,
// else the folders above this binary (make build puts it in .build/bin),
// above the source file it was compiled from (go install from a checkout),
// or above the working directory. "" when there is none.
func findCheckout() string {
	if dir := os.Getenv("LUCIUS_SOURCE_DIR"); dir != "" {
		return dir
	}
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for ; ; dir = filepath.Dir(dir) {
			if isCheckout(dir) {
				return dir
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return ""
}

func isCheckout(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "sdk", "worker", "go.mod"))
	return err == nil && bytes.HasPrefix(b, []byte("module github.com/lucius-platform/lucius/sdk/worker\n"))
}

func workerNewCommand() *cobra.Command {
	var (
		handlers          []string
		dir, module, from string
		published, noTidy bool
	)
	cmd := &cobra.Command{
		Use:   "new NAME --handlers H1,H2 [--dir D]",
		Short: "Write a new worker: a module that imports the worker SDK, with a stub per handler",
		Long: `Write a standalone Go module for the worker service NAME: main.go (registers
the handlers and calls worker.Run), one file per handler with a working stub,
a test per handler that runs the SDK's contract kit, a workflow using the
handlers, a Dockerfile and a README. go test ./... and go build ./... pass in
it at once.

The module requires the tagged SDK and contract modules (` + sdkVersion + `). To build
offline it replaces them with a local Lucius checkout: --lucius, else
$LUCIUS_SOURCE_DIR, else the checkout this binary was built in or the working
directory is in. --published writes no replace. Then go mod tidy fills go.sum
(--no-tidy skips it).`,
		Example: `  lucius worker new reverser --handlers REVERSE --dir /tmp/reverser
  cd /tmp/reverser && go test ./... && go build ./...`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			source := ""
			if !published {
				if source = from; source == "" {
					source = findCheckout()
				}
				if source == "" {
					return &codedError{code: exitUsage, err: errors.New("no Lucius checkout found for an offline build: pass --lucius DIR, set LUCIUS_SOURCE_DIR, or --published")}
				}
				abs, err := filepath.Abs(source)
				if err != nil {
					return err
				}
				if source = abs; !isCheckout(source) {
					return &codedError{code: exitUsage, err: fmt.Errorf("%s holds no Lucius checkout (sdk/worker/go.mod)", source)}
				}
			}
			s, err := newScaffold(name, handlers, module, source)
			if err != nil {
				return &codedError{code: exitUsage, err: err}
			}
			if dir == "" {
				dir = name
			}
			files, err := s.write(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s: %s\n", dir, strings.Join(files, ", "))
			if !noTidy {
				tidy := exec.CommandContext(cmd.Context(), "go", "mod", "tidy")
				tidy.Dir, tidy.Stdout, tidy.Stderr = dir, cmd.ErrOrStderr(), cmd.ErrOrStderr()
				if err := tidy.Run(); err != nil {
					return fmt.Errorf("go mod tidy in %s: %w (the files are written; fix and run it again)", dir, err)
				}
			}
			fmt.Fprintf(out, "next: cd %s && go test ./... && go build ./...   (README.md: run it beside make up)\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&handlers, "handlers", nil, "the handlers (step types) the worker serves, comma-separated")
	f.StringVar(&dir, "dir", "", "where to write the module (default ./NAME); must be empty or absent")
	f.StringVar(&module, "module", "", "the module path (default NAME)")
	f.StringVar(&from, "lucius", "", "a local Lucius checkout to build against offline (default: found)")
	f.BoolVar(&published, "published", false, "require the published modules only (no replace)")
	f.BoolVar(&noTidy, "no-tidy", false, "do not run go mod tidy")
	_ = cmd.MarkFlagRequired("handlers")
	return cmd
}
