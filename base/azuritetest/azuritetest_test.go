package azuritetest_test

import (
	"context"
	"testing"

	"github.com/lucius-platform/lucius/base/azuritetest"
)

// Azurite starts and serves the shared-key requests the package signs
// itself (create a container, put and get a blob), and refuses one signed
// with another key.
func TestAzuriteServesSignedRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	az := azuritetest.Start(t)
	az.CreateContainer(t, "inputs")
	az.CreateContainer(t, "inputs") // already there: fine
	if err := az.Put(ctx, "inputs", "dir/in.txt", []byte("hello blob")); err != nil {
		t.Fatal(err)
	}
	if got, err := az.Get(ctx, "inputs", "dir/in.txt"); err != nil || string(got) != "hello blob" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if _, err := az.Get(ctx, "inputs", "missing.txt"); err == nil {
		t.Error("Get of a missing blob succeeded")
	}
	wrong := *az
	wrong.Key = "d3Jvbmcga2V5"
	if err := wrong.Create(ctx, "other"); err == nil {
		t.Fatal("a container was created with a wrong key")
	}
}
