package auth

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1" // also registers the contract's files
)

// TestEveryRPCHasARoleEntry fails when the contract gains an RPC that the
// role table does not name: a method without an entry is denied to all.
func TestEveryRPCHasARoleEntry(t *testing.T) {
	t.Parallel()
	seen := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("lucius.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				method := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				seen++
				roles, ok := MethodRoles[method]
				if !ok || len(roles) == 0 {
					t.Errorf("%s has no entry in MethodRoles", method)
				}
			}
		}
		return true
	})
	if seen < 28 {
		t.Fatalf("found only %d RPCs in lucius.v1; is the contract registered?", seen)
	}
}

// TestRoleTableKeepsAdminAndCallbacksApart: a worker identity reaches only
// what a worker does (its callbacks and announcing its handlers), and those
// are workers' alone.
func TestRoleTableKeepsAdminAndCallbacksApart(t *testing.T) {
	t.Parallel()
	for method, roles := range MethodRoles {
		for _, r := range roles {
			switch {
			case r == RoleWorker && len(roles) != 3 && !isWorkerMethod(method):
				t.Errorf("%s allows workers but is no worker's method", method)
			case r != RoleWorker && isWorkerMethod(method):
				t.Errorf("%s is a worker's method but allows %s", method, r)
			}
		}
	}
}

// isWorkerMethod: the callbacks, and WorkerService.RegisterWorker.
func isWorkerMethod(method string) bool {
	return strings.HasPrefix(method, "/lucius.v1.CallbackService/") ||
		method == luciusv1.WorkerService_RegisterWorker_FullMethodName
}
