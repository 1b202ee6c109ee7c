package main

import (
	"context"
	"fmt"
	"regexp"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

var jobIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// uiCommand prints a one-time login URL of the web console: the gateway
// mints the ticket for this command's principal, so the browser acts with
// the same roles and tenants without ever holding the token.
func uiCommand(s *session) *cobra.Command {
	var jobID string
	cmd := &cobra.Command{
		Use:   "ui [--job JOB_ID]",
		Short: "Print a one-time login URL of the web console (valid for a minute)",
		Long: `Print a one-time login URL of the web console (/ui/ on the gateway's HTTP
address, or LUCIUS_CONSOLE_URL). Open it in a browser within a minute: it
signs the browser in as this command's principal and opens the jobs page,
or with --job that job's page. The link works once.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jobID != "" && !jobIDPattern.MatchString(jobID) {
				return usageErrorf("--job %q: a job id is 64 lowercase hex digits", jobID)
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewConsoleServiceClient(conn).CreateConsoleTicket(ctx,
					&luciusv1.CreateConsoleTicketRequest{JobId: jobID})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					fmt.Fprintln(t, resp.GetLoginUrl())
					fmt.Fprintf(cmd.ErrOrStderr(), "one-time login link, valid until %s\n", when(resp.GetExpireTime()))
				})
			})
		},
	}
	cmd.Flags().StringVar(&jobID, "job", "", "open this job's page")
	return cmd
}
