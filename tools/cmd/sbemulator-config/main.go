// Command sbemulator-config prints the Azure Service Bus emulator's entity
// file for Lucius's topology (the services of the built-in handlers):
//
//	go run ./tools/cmd/sbemulator-config > servicebus-emulator.json
package main

import (
	"fmt"
	"os"

	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/workflow"
	"github.com/lucius-platform/lucius/tools/sbemulator"
)

func main() {
	out, err := sbemulator.Render(topology.Config{Services: workflow.BuiltinServices()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbemulator-config:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, "sbemulator-config:", err)
		os.Exit(1)
	}
}
