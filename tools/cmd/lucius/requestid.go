package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// withRequestID puts id (--request-id) into the request_id field (AIP-155)
// of every request that has one and leaves it empty: running the same
// command again with the same id is answered with the first answer, without
// changing anything twice. Requests without the field are sent as they are.
func withRequestID(id string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m, ok := req.(proto.Message); ok && id != "" {
			r := m.ProtoReflect()
			if fd := r.Descriptor().Fields().ByName("request_id"); fd != nil && fd.Kind() == protoreflect.StringKind &&
				!fd.IsList() && r.Get(fd).String() == "" {
				r.Set(fd, protoreflect.ValueOfString(id))
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
