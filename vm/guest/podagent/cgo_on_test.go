//go:build cgo

package podagent

// cgoOn: this test binary uses cgo, where syscall.AllThreadsSyscall refuses.
const cgoOn = true
