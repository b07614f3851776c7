//go:build tools

// Package lws pins LeaderWorkerSet v0.7.0: e2e/build-lws.sh builds its controller
// manager from the imported main package and takes its CRD from the same module
// version. Nothing here is compiled.
package lws

import (
	_ "sigs.k8s.io/lws/cmd"
)
