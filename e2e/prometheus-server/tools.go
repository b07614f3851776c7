//go:build tools

// Package prometheusserver pins Prometheus v3.5.0 (module v0.305.0, the version
// prometheus-operator v0.85.0's module requires), built for the Prometheus pods of the
// local cluster. Debian's Prometheus cannot serve there: it is built without Kubernetes
// service discovery, which every ServiceMonitor and PodMonitor becomes. Its own module,
// apart from e2e/monitoring: the operator needs a newer client-go than this Prometheus
// compiles against.
package prometheusserver

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
