// Command lucius is the command line of Lucius for partners and operators.
// Today it mints tokens from the embedded default's local issuer:
//
//	lucius token --tenant acme --role partner
//	lucius token --role operator
//	lucius token --role worker --service ocr
//
// The token is printed on stdout, for an Authorization: Bearer header.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "lucius",
		Short:         "Lucius's command line",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(tokenCommand())
	root.SetErrPrefix("lucius:")
	root.CompletionOptions.HiddenDefaultCmd = true
	return root
}
