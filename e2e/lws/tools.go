//go:build tools

// Package lws pins LeaderWorkerSet v0.9.0: e2e/build-lws.sh builds its controller
// manager from the imported main package and takes its CRDs from the same module
// version. Nothing here is compiled. Not v0.7 or v0.8: they pass rollingUpdate's
// maxUnavailable to the leader StatefulSet, which refuses 0 (the operator's default,
// with maxSurge 1), and create no pods (kubernetes-sigs/lws#776, fixed by #781).
package lws

import (
	_ "sigs.k8s.io/lws/cmd"
)
