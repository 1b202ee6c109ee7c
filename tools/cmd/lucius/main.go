// Command lucius is the command line of Lucius for partners and operators:
// submit and follow jobs, inspect steps, events and dead letters, manage
// workflows, circuit breakers and workers, and mint local tokens.
//
//	lucius submit --type OCR_EMBEDDING_SIS --tenant acme --input-ref file:///… --output-ref file:///… --payload '{"prompt_set":["…"]}' --wait
//	lucius job get JOB_ID -o yaml
//	lucius token --role operator
//	lucius ui --job JOB_ID
//
// It talks gRPC to the gateway of the current context (a configuration file
// with named contexts; LUCIUS_ADDR and LUCIUS_TOKEN override it). Exit codes
// are listed in exit.go and in README's "Command line".
package main

import (
	"context"
	"os/signal"
	"syscall"

	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

func main() {
	// Ctrl-C cancels the command's context: a tenant watch ends cleanly,
	// anything else stopped half-way exits 130.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rootCommand().ExecuteContext(ctx)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil && interrupted {
		fmt.Fprintln(os.Stderr, "lucius: interrupted")
		os.Exit(exitInterrupted)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lucius:", describe(err))
	}
	os.Exit(exitCode(err))
}

// session is what every command shares: the chosen context, the output
// format, the call timeout, and the connection once dialled.
type session struct {
	contextName string
	format      string
	timeout     time.Duration
	requestID   string
	conn        *grpc.ClientConn
}

func (s *session) printer(cmd *cobra.Command) printer {
	return printer{format: s.format, out: cmd.OutOrStdout()}
}

// connect dials the gateway of the chosen context (once).
func (s *session) connect(ctx context.Context) (*grpc.ClientConn, error) {
	if s.conn != nil {
		return s.conn, nil
	}
	cfg, err := loadConfig(configPath())
	if err != nil {
		return nil, &codedError{code: exitUsage, err: err}
	}
	opts, err := cfg.resolve(s.contextName)
	if err != nil {
		return nil, err
	}
	if s.conn, err = opts.dial(ctx, grpc.WithChainUnaryInterceptor(withRequestID(s.requestID))); err != nil {
		return nil, &codedError{code: exitUnreachable, err: err}
	}
	return s.conn, nil
}

// call runs fn with a connection and the call timeout.
func (s *session) call(cmd *cobra.Command, fn func(ctx context.Context, conn *grpc.ClientConn) error) error {
	if err := s.printer(cmd).check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), s.timeout)
	defer cancel()
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	return fn(ctx, conn)
}

func rootCommand() *cobra.Command {
	s := &session{}
	root := &cobra.Command{
		Use:   "lucius",
		Short: "Lucius's command line",
		Long: `Lucius's command line for partners and operators.

It calls the gateway of the current context in the configuration file
($LUCIUS_CONFIG, else <user config dir>/lucius/config.yaml; see README's
"Command line"), or 127.0.0.1:9090 (make up) when there is none.
LUCIUS_ADDR and LUCIUS_TOKEN override the context's address and token.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&s.contextName, "context", "", "the configuration file's context to use (default: its current-context)")
	root.PersistentFlags().StringVarP(&s.format, "output", "o", formatTable, "output format: table, json or yaml")
	root.PersistentFlags().DurationVar(&s.timeout, "timeout", 30*time.Second, "time limit of each call (with --wait: of the whole wait too)")
	root.PersistentFlags().StringVar(&s.requestID, "request-id", "", "request_id (AIP-155) of a change: the same command again with the same id "+
		"answers the first answer and changes nothing twice (1-64 printable ASCII characters; calls that take none ignore it)")
	root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{formatTable, formatJSON, formatYAML}, cobra.ShellCompDirectiveNoFileComp)) //nolint:errcheck
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &codedError{code: exitUsage, err: err} })
	root.AddCommand(tokenCommand(), trustCommand(), submitCommand(s), jobCommand(s), dlqCommand(s), workflowCommand(s),
		breakerCommand(s), workerCommand(s), runbookCommand(s), batchCommand(s), configCommand(s), membersCommand(s), uiCommand(s),
		migrateCommand(s))
	root.AddCommand(pauseCommands(s)...)
	return root
}

// usageArgs wraps cobra's argument checks so a wrong count exits with exitUsage.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &codedError{code: exitUsage, err: err}
		}
		return nil
	}
}
