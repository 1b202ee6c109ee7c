package main

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func TestRequestIDFlagFillsTheFieldOfRequestsThatHaveIt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		req  proto.Message
		want proto.Message
	}{
		{"a mutating request gets the id", "r-1", &luciusv1.CancelJobRequest{JobId: "j"}, &luciusv1.CancelJobRequest{JobId: "j", RequestId: "r-1"}},
		{"an id already set stays", "r-1", &luciusv1.PauseWorkRequest{RequestId: "mine"}, &luciusv1.PauseWorkRequest{RequestId: "mine"}},
		{"a request without the field is untouched", "r-1", &luciusv1.GetJobRequest{JobId: "j"}, &luciusv1.GetJobRequest{JobId: "j"}},
		{"without the flag nothing is set", "", &luciusv1.CancelJobRequest{JobId: "j"}, &luciusv1.CancelJobRequest{JobId: "j"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var sent any
			invoker := func(_ context.Context, _ string, req, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				sent = req
				return nil
			}
			if err := withRequestID(tt.id)(context.Background(), "/m", tt.req, nil, nil, invoker); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(sent.(proto.Message), tt.want) {
				t.Fatalf("sent %v, want %v", sent, tt.want)
			}
		})
	}
}
