package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
)

func TestCheckSize(t *testing.T) {
	p := Policy{Spec: vm.Spec{MemoryMiB: 512, VCPUs: 1}, MaxBoxMemoryMiB: 2048, MaxBoxVCPUs: 4,
		MaxUserMemoryMiB: 3072, MaxUserVCPUs: 6}
	for _, c := range []struct {
		name      string
		mem, cpus int
		used      boxSize
		want      boxSize
		err       error
		says      string
	}{
		{name: "defaults", want: boxSize{512, 1}},
		{name: "asked", mem: 768, cpus: 2, want: boxSize{768, 2}},
		{name: "at the caps", mem: 2048, cpus: 4, want: boxSize{2048, 4}},
		{name: "negative memory", mem: -1, err: ErrInvalid, says: "must be positive"},
		{name: "negative cpus", cpus: -2, err: ErrInvalid, says: "must be positive"},
		{name: "too little memory", mem: 63, err: ErrInvalid, says: "at least 64 MiB"},
		{name: "more vCPUs than a machine", cpus: 65, err: ErrInvalid, says: "at most 64 vCPUs"},
		{name: "over the box memory cap", mem: 2049, err: ErrLimit, says: "box.max_memory_mib"},
		{name: "over the box cpu cap", cpus: 5, err: ErrLimit, says: "box.max_cpus"},
		{name: "over the user's memory", mem: 1024, used: boxSize{2560, 1}, err: ErrLimit, says: "box.max_user_memory_mib"},
		{name: "default size over the user's memory", used: boxSize{2600, 1}, err: ErrLimit, says: "already have 2600 MiB"},
		{name: "over the user's cpus", cpus: 2, used: boxSize{512, 5}, err: ErrLimit, says: "box.max_user_cpus"},
		{name: "just within the user's caps", mem: 1024, cpus: 2, used: boxSize{2048, 4}, want: boxSize{1024, 2}},
	} {
		got, err := checkSize(p, DelegateRequest{MemoryMiB: c.mem, VCPUs: c.cpus}, c.used)
		switch {
		case c.err == nil && (err != nil || got != c.want):
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		case c.err != nil && (!errors.Is(err, c.err) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.err, c.says)
		}
	}
	// No caps: only what a machine can run.
	if got, err := checkSize(Policy{}, DelegateRequest{MemoryMiB: 1 << 20, VCPUs: 64}, boxSize{}); err != nil || got != (boxSize{1 << 20, 64}) {
		t.Errorf("no caps: %+v %v", got, err)
	}
	// The default size is never refused by the per-box caps, even when an
	// operator set them below it.
	if got, err := checkSize(Policy{Spec: vm.Spec{MemoryMiB: 4096, VCPUs: 8}, MaxBoxMemoryMiB: 1024, MaxBoxVCPUs: 2}, DelegateRequest{}, boxSize{}); err != nil || got != (boxSize{4096, 8}) {
		t.Errorf("default size over the caps: %+v %v", got, err)
	}
}

func TestParseSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"768", 768, true}, {" 2 ", 2, true},
		{"0", 0, false}, {"-1", 0, false}, {"1.5", 0, false}, {"2G", 0, false}, {"lots", 0, false},
		{"99999999999999999999", 0, false}, {"0x10", 0, false},
	} {
		for what, parse := range map[string]func(string) (int, error){"memory": ParseMemory, "cpus": ParseCPUs} {
			got, err := parse(c.in)
			if c.ok != (err == nil) || got != c.want || (err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), what))) {
				t.Errorf("Parse %s %q = %d, %v", what, c.in, got, err)
			}
		}
	}
}

func TestParseExtension(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"30m", 30 * time.Minute}, {"2h", 2 * time.Hour}, {" 1h30m ", 90 * time.Minute},
		{"", 0}, {"0s", 0}, {"-5m", 0}, {"soon", 0}, {"30", 0}, {"1d", 0},
	} {
		got, err := ParseExtension(c.in)
		if got != c.want || (c.want == 0) != (err != nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("ParseExtension(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestCheckLifetime(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := Policy{MaxLifetime: 6 * time.Hour}
	dl := start.Add(4 * time.Hour)
	for _, c := range []struct {
		name  string
		p     Policy
		dl    time.Time
		until time.Time
		says  string
	}{
		{name: "within", p: p, dl: dl, until: dl.Add(2 * time.Hour)},
		{name: "no cap", p: Policy{}, dl: dl, until: dl.Add(1000 * time.Hour)},
		{name: "a minute over", p: p, dl: dl, until: dl.Add(2*time.Hour + time.Minute), says: "extended by at most 2h0m0s"},
		{name: "at the cap already", p: p, dl: start.Add(6 * time.Hour), until: start.Add(7 * time.Hour), says: "already lives as long"},
	} {
		err := checkLifetime(c.p, "b", start, c.dl, c.until)
		if (c.says == "") != (err == nil) || (err != nil && (!errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "box.max_lifetime"))) {
			t.Errorf("%s: %v, want %q", c.name, err, c.says)
		}
	}
}

// FuzzParseSize: whatever a front passes, the parse answers a positive
// number or ErrInvalid, never anything else.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"", "768", "0", "-1", "1e3", "２", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseMemory(s)
		if err != nil && !errors.Is(err, ErrInvalid) || err == nil && n < 0 || err != nil && n != 0 {
			t.Fatalf("ParseMemory(%q) = %d, %v", s, n, err)
		}
		d, err := ParseExtension(s)
		if err != nil && !errors.Is(err, ErrInvalid) || err == nil && d <= 0 {
			t.Fatalf("ParseExtension(%q) = %v, %v", s, d, err)
		}
	})
}
