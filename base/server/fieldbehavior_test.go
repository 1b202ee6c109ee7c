package server

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// A client that sends back a configuration it read has the OUTPUT_ONLY
// fields ignored (AIP-203); the fields it may set, revision included, stay.
func TestClearOutputOnlyIgnoresWhatTheServerSets(t *testing.T) {
	t.Parallel()
	limit := int32(5)
	req := &luciusv1.UpdateTenantConfigRequest{RequestId: "r-1", Config: &luciusv1.TenantConfig{
		TenantId: "acme", MaxActiveJobs: &limit, Revision: 7,
		UpdateTime: timestamppb.Now(), UpdatedBy: "someone#else"}}
	ClearOutputOnly(req)
	want := &luciusv1.UpdateTenantConfigRequest{RequestId: "r-1", Config: &luciusv1.TenantConfig{
		TenantId: "acme", MaxActiveJobs: &limit, Revision: 7}}
	if !proto.Equal(req, want) {
		t.Fatalf("after ClearOutputOnly: %v, want %v", req, want)
	}
}

func TestClearOutputOnlyLeavesRequestsWithoutThemAlone(t *testing.T) {
	t.Parallel()
	req := &luciusv1.CancelJobRequest{JobId: "j", Reason: "why", RequestId: "r"}
	want := proto.Clone(req)
	ClearOutputOnly(req)
	ClearOutputOnly(nil)
	if !proto.Equal(req, want) {
		t.Fatalf("a request without output-only fields changed: %v", req)
	}
}
