//go:build tools

// Package keda pins KEDA v2.21.0: e2e/build-keda.sh builds its operator and metrics
// API server from the imported main packages and takes its CRDs from the same module
// version. Nothing here is compiled.
package keda

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
