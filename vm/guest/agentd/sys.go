package agentd

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

var errorsIs = errors.Is

// rndAddEntropy is RNDADDENTROPY, _IOW('R', 0x03, int[2]).
const rndAddEntropy = 0x40085203

// maxSeed bounds one Reseed.
const maxSeed = 4096

// reseed credits seed to the kernel's entropy pool, or at least mixes it in
// (writing /dev/urandom) when crediting is not permitted.
func reseed(seed []byte) error {
	if len(seed) == 0 || len(seed) > maxSeed {
		return fmt.Errorf("reseed: %d bytes, want 1..%d: %w", len(seed), maxSeed, os.ErrInvalid)
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(len(seed) * 8)
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(seed))
	copy(buf[8:], seed)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&buf[0])))
	if errno == 0 {
		return nil
	}
	if _, err := f.Write(seed); err != nil {
		return fmt.Errorf("reseed: ioctl: %v; write: %w", errno, err)
	}
	return nil
}
