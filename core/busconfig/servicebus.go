package busconfig

import (
	"context"

	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/bus/sbbus"
)

// This build's Service Bus transport is package sbbus.
func init() { serviceBusAdapter = openServiceBus }

// openServiceBus maps ServiceBusConfig onto sbbus.Config. With a namespace,
// sbbus authenticates with azidentity.DefaultAzureCredential.
func openServiceBus(_ context.Context, cfg ServiceBusConfig) (bus.Bus, error) {
	return sbbus.New(sbbus.Config{
		ConnectionString: cfg.ConnectionString,
		Namespace:        cfg.Namespace,
		SkipProvisioning: !cfg.Provision,
	})
}
