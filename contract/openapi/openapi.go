// Package openapi holds the OpenAPI 3 document of the contract's REST
// mapping, generated from proto/ by make generate (protoc-gen-openapi, then
// tools/openapidoc): the document the gateway serves at /openapi.json.
package openapi

import _ "embed"

// JSON is the document, lucius.openapi.json.
//
//go:embed lucius.openapi.json
var JSON []byte
