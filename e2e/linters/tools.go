//go:build tools

// Package linters pins the manifest linters `make test` runs on every rendered example
// and on the chart: kubeconform (schemas: the local API server's and the CRDs') and
// kube-score. Nothing here is compiled: the build script runs `go build` on the imported
// main packages.
package linters

import (
	_ "github.com/yannh/kubeconform/cmd/kubeconform"
	_ "github.com/zegl/kube-score/cmd/kube-score"
)
