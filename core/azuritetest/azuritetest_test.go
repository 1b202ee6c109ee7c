package azuritetest_test

import (
	"context"
	"testing"

	"github.com/lucius-platform/lucius/core/azuritetest"
)

// Azurite starts, accepts the shared-key request that creates a container,
// and refuses one signed with another key.
func TestAzuriteStartsAndCreatesContainers(t *testing.T) {
	t.Parallel()
	az := azuritetest.Start(t)
	az.CreateContainer(t, "inputs")
	az.CreateContainer(t, "inputs") // already there: fine
	wrong := *az
	wrong.Key = "d3Jvbmcga2V5"
	if err := wrong.Create(context.Background(), "other"); err == nil {
		t.Fatal("a container was created with a wrong key")
	}
}
