// Command lucius-bicep prints the Bicep template of an Azure Service Bus
// namespace with Lucius's topology (the services of the built-in handlers, the
// default topology settings), as sbemulator-config does for the emulator:
//
//	go run ./tools/cmd/lucius-bicep > deploy/azure/servicebus.bicep
//
// or make bicep.
package main

import (
	"fmt"
	"os"

	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/workflow"
	"github.com/lucius-platform/lucius/tools/bicep"
)

func main() {
	out, err := bicep.Render(topology.Config{Services: workflow.BuiltinServices()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lucius-bicep:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-bicep:", err)
		os.Exit(1)
	}
}
