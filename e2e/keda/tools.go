//go:build tools

// Package keda pins KEDA v2.21.0. The e2e tests take its CRDs from this module version
// (cluster.install_keda_crds) to admit the example ScaledObject; the operator and the
// metrics API server are not built or run here yet.
package keda

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
