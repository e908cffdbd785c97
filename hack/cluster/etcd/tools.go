//go:build tools

// Package tools pins etcd: Debian's etcd 3.4 is too old for a current
// kube-apiserver (its watches fail with ResourceVersionTooLarge).
package tools

import _ "go.etcd.io/etcd/server/v3"
