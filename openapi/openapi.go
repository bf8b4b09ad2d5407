// Package openapi holds the OpenAPI 3.1 description of the service's HTTP
// API, embedded in the binary so that the running server serves the exact
// document its tests validate against (GET /openapi.yaml).
//
// It is not called "api": /api is the git-ignored output of
// `go build ./cmd/api` at the repository root.
package openapi

import _ "embed"

// ContentType is the media type GET /openapi.yaml is served with.
const ContentType = "application/yaml"

// YAML is openapi.yaml, the description of every endpoint, header and error
// code. internal/app/openapi_test.go validates every e2e request and
// response against it. Treat it as read-only.
//
//go:embed openapi.yaml
var YAML []byte
