package vm

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/vm/image"
	"sbx.dev/sbx/vm/kernel"
	"sbx.dev/sbx/vm/qemu/host"
)

// Check is one line of `sbx doctor`.
type Check struct {
	Name   string
	OK     bool
	Detail string // what was found, or the fix when not OK
	// Optional checks (the agent image, busybox) do not fail the doctor.
	Optional bool
}

// Diagnose checks what boxes need on this host: QEMU, a guest kernel, the
// accelerator (probing KVM once, cached under dataDir and the machine's
// buildCache; log hears when the probe starts and ends), busybox, the
// initramfs tools and the agent image. An error means ctx ended during the
// probe.
func Diagnose(ctx context.Context, dataDir, buildCache string, log *slog.Logger) ([]Check, error) {
	var out []Check
	qemu, err := host.FindQEMU()
	if err != nil {
		out = append(out, Check{Name: "qemu", Detail: err.Error()})
	} else {
		v, verr := host.Version(ctx, qemu)
		if verr != nil {
			out = append(out, Check{Name: "qemu", Detail: verr.Error() + " (reinstall qemu-system-x86)"})
		} else {
			out = append(out, Check{Name: "qemu", OK: true, Detail: qemu + ": " + v})
		}
	}
	k, kerr := kernel.Resolve(dataDir)
	if kerr != nil {
		out = append(out, Check{Name: "kernel", Detail: kerr.Error()})
	} else {
		d := fmt.Sprintf("%s %s (%s)", k.Kind, k.Path, k.Release)
		if k.Kind == kernel.KindStock {
			d += fmt.Sprintf(", %d modules; `go tool -modfile=tools/go.mod task kernel` builds the faster small kernel", len(k.Modules))
		}
		out = append(out, Check{Name: "kernel", OK: true, Detail: d})
	}
	if err == nil && kerr == nil {
		v, err := host.ChooseAccel(ctx, host.ProbeConfig{QEMU: qemu, Kernel: k.Path, Release: k.Release,
			Cache: filepath.Join(dataDir, "accel.json"), Shared: host.SharedVerdict(buildCache), Log: log})
		if err != nil {
			return nil, err
		}
		out = append(out, Check{Name: "accelerator", OK: true, Detail: v.Accel + ": " + v.Why})
	} else {
		out = append(out, Check{Name: "accelerator", Detail: "not probed: needs QEMU and a kernel"})
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		_, why := host.RAMDir(abs)
		out = append(out, Check{Name: "guest RAM", OK: true, Detail: why})
	}
	out = append(out, busyboxCheck())
	out = append(out, initramfsCheck(dataDir))
	for _, tool := range []struct{ bin, pkg string }{{"mkfs.ext4", "e2fsprogs"}, {"qemu-img", "qemu-utils"}} {
		p, err := exec.LookPath(tool.bin)
		if err != nil {
			if _, serr := os.Stat("/sbin/" + tool.bin); serr == nil {
				p, err = "/sbin/"+tool.bin, nil
			}
		}
		if err != nil {
			out = append(out, Check{Name: tool.bin, Detail: fmt.Sprintf("not found: install %s (go tool -modfile=tools/go.mod task deps)", tool.pkg)})
		} else {
			out = append(out, Check{Name: tool.bin, OK: true, Detail: p})
		}
	}
	if img, err := image.Resolve(dataDir, "agent"); err != nil {
		out = append(out, Check{Name: "agent image", Optional: true, Detail: err.Error()})
	} else {
		out = append(out, Check{Name: "agent image", OK: true, Detail: fmt.Sprintf("%s (%d MiB)", img.Path, img.Size>>20)})
	}
	return out, nil
}

// busyboxCheck finds a static busybox, which the initramfs carries as the
// boxes' shell.
func busyboxCheck() Check {
	c := Check{Name: "busybox", Optional: true}
	p, err := exec.LookPath("busybox")
	if err != nil {
		c.Detail = "not found: install busybox-static (go tool -modfile=tools/go.mod task deps); boxes will have no shell"
		return c
	}
	f, err := elf.Open(p)
	if err != nil {
		c.Detail = fmt.Sprintf("%s: %v", p, err)
		return c
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			c.Detail = p + " is dynamically linked: install busybox-static (go tool -modfile=tools/go.mod task deps)"
			return c
		}
	}
	c.OK, c.Detail = true, p+" (static)"
	return c
}

// initramfsCheck reports the newest generated initramfs. The gateway
// builds it at start from its own binary, so none yet is not an error.
func initramfsCheck(dataDir string) Check {
	c := Check{Name: "initramfs", Optional: true}
	paths, _ := filepath.Glob(filepath.Join(dataDir, "initramfs", "initramfs-*.cpio"))
	var newest string
	var newestT int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().UnixNano() > newestT {
			newest, newestT = p, fi.ModTime().UnixNano()
		}
	}
	if newest == "" {
		c.OK, c.Detail = true, "none yet: generated from this binary when the gateway starts"
		return c
	}
	fi, _ := os.Stat(newest)
	c.OK, c.Detail = true, fmt.Sprintf("%s (%d MiB)", newest, fi.Size()>>20)
	return c
}

// PrintChecks writes checks as a table and reports whether all required
// ones passed.
func PrintChecks(w io.Writer, checks []Check) bool {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ok := true
	for _, c := range checks {
		mark := "ok"
		if !c.OK {
			mark = "FAIL"
			if c.Optional {
				mark = "warn"
			} else {
				ok = false
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, c.Name, strings.ReplaceAll(c.Detail, "\n", " "))
	}
	tw.Flush()
	return ok
}

// NewDoctorCommand returns `sbx doctor`: what boxes need on this host and
// what to install or build when something is missing.
func NewDoctorCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check QEMU, the guest kernel, the accelerator and the images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				dataDir = os.Getenv("SBX_DATA")
			}
			if dataDir == "" {
				dataDir = ".sbx"
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "data dir: %s\n", dataDir)
			// Long steps say so on stderr, keeping stdout the table.
			progress := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{ReplaceAttr: dropTimeAndLevel}))
			checks, err := Diagnose(cmd.Context(), dataDir, host.BuildCache(os.Getenv("SBX_CACHE")), progress)
			if err != nil {
				return err
			}
			if !PrintChecks(cmd.OutOrStdout(), checks) {
				return fmt.Errorf("doctor: some checks failed (see the FAIL lines)")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", "", "data directory (default $SBX_DATA, else .sbx)")
	return cmd
}

// dropTimeAndLevel leaves a progress line its message and attributes.
func dropTimeAndLevel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
		return slog.Attr{}
	}
	return a
}
