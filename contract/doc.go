// Package contract is the home of Lucius's generated API: the lucius.v1 protobuf
// messages, gRPC clients and servers, grpc-gateway REST handlers (lucius/v1) and
// the OpenAPI 3 document (openapi/lucius.openapi.json, embedded in package openapi). Partner teams depend on this
// module alone. Everything here is produced by `make generate` from proto/; edit
// the .proto files, never the generated code.
package contract
