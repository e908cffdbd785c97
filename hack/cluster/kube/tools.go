//go:build tools

// Package tools pins the Kubernetes server commands this wrapper module
// builds (k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces
// every staging module with a local path, so this module repeats those
// replaces with the published v0.x versions).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
