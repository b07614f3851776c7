//go:build tools

// Package controlplane pins the Go modules that the local test control plane is
// built from. Nothing here is compiled: the build script runs `go build` on the
// imported main packages, with versions resolved through this module's go.mod, and
// on crdcheck/ and podcheck/, which judge the CRD and Deployments with the API
// server's own validation code.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "helm.sh/helm/v4/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
