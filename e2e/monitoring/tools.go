//go:build tools

// Package monitoring pins prometheus-operator, built from its Go module for the local
// cluster: the operator and its config reloader. Nothing here is compiled: the build
// script runs `go build` on the imported main packages and takes the CRDs from the
// same module version, so the CRDs always match the operator that serves them.
package monitoring

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
